//! Just enough HTTP/1.1 for tests: a client for the gateway (requests and a server-sent
//! events reader) and a recording server standing in for Heat's signal URL.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body as text.
    pub body: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

fn write_request(
    stream: &mut TcpStream,
    method: &str,
    addr: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    if let Some(body) = body {
        stream.write_all(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Reads the status line and headers; returns the status and the headers, lowercased names.
fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap_or_else(|e| panic!("{e}"));
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            return (status, headers);
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
}

/// Sends one request (Connection: close) and reads the whole response.
pub fn request(method: &str, addr: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap_or_else(|e| panic!("{e}"));
    write_request(&mut stream, method, addr, path, token, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap_or(0);
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).unwrap_or_else(|e| panic!("{e}"));
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        reader.read_to_end(&mut body).unwrap_or(0);
    }
    Response { status, body: String::from_utf8_lossy(&body).into_owned(), headers }
}

/// A server-sent events stream.
pub struct EventStream {
    reader: BufReader<TcpStream>,
    /// The response status.
    pub status: u16,
}

impl EventStream {
    /// Opens `GET path` and reads the response head.
    pub fn open(addr: &str, path: &str, token: &str) -> EventStream {
        EventStream::open_after(addr, path, token, None)
    }

    /// [`EventStream::open`] as a reconnecting EventSource does: with `Last-Event-ID`.
    pub fn open_after(addr: &str, path: &str, token: &str, last_event_id: Option<&str>) -> EventStream {
        let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap_or_else(|e| panic!("{e}"));
        let resume = last_event_id.map(|id| format!("Last-Event-ID: {id}\r\n")).unwrap_or_default();
        // As an EventSource asks.
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nAuthorization: Bearer {token}\r\n{resume}\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut reader = BufReader::new(stream);
        let (status, _) = read_head(&mut reader);
        EventStream { reader, status }
    }

    /// The next event's `data` as JSON (chunk framing and keep-alive comments skipped).
    pub fn next_data(&mut self) -> Value {
        self.next_event().1
    }

    /// The next event's `id` (if it has one) and `data`.
    pub fn next_event(&mut self) -> (Option<String>, Value) {
        let mut line = String::new();
        let mut id = None;
        loop {
            line.clear();
            let n = self.reader.read_line(&mut line).unwrap_or_else(|e| panic!("reading events: {e}"));
            assert!(n > 0, "the event stream ended");
            let line = line.trim_end();
            if let Some(value) = line.strip_prefix("id: ") {
                id = Some(value.to_owned());
            }
            if let Some(data) = line.strip_prefix("data: ") {
                let data = serde_json::from_str(data).unwrap_or_else(|e| panic!("event data {data:?}: {e}"));
                return (id, data);
            }
        }
    }
}

/// An event as a stream delivers it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    /// Its `event:` name (`message` when it has none).
    pub name: String,
    /// Its `data`, as JSON.
    pub data: Value,
}

impl EventStream {
    /// Reads until the response body ends (its last chunk, or the connection closing) and
    /// returns the events on the way; panics if it has not ended within `limit`.
    pub fn read_to_end(&mut self, limit: Duration) -> Vec<StreamEvent> {
        let deadline = std::time::Instant::now() + limit;
        let mut events = Vec::new();
        let mut name = None;
        let mut line = String::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1));
            self.reader.get_ref().set_read_timeout(Some(left)).unwrap_or_else(|e| panic!("{e}"));
            line.clear();
            match self.reader.read_line(&mut line) {
                Ok(0) => return events,
                Ok(_) => {}
                Err(error) => panic!("the event stream did not end within {limit:?} ({error}); read {events:?}"),
            }
            let line = line.trim_end();
            // The last chunk of the body (a chunk size line; an event's lines have a field name).
            if line == "0" {
                return events;
            }
            if let Some(value) = line.strip_prefix("event: ") {
                name = Some(value.to_owned());
            }
            if let Some(data) = line.strip_prefix("data: ") {
                let data = serde_json::from_str(data).unwrap_or_else(|e| panic!("event data {data:?}: {e}"));
                events.push(StreamEvent { name: name.take().unwrap_or_else(|| "message".into()), data });
            }
        }
    }
}

/// One request a [`Recorder`] received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Content-Type header.
    pub content_type: String,
    /// Body.
    pub body: Vec<u8>,
}

/// An HTTP server that records every request and answers each with the next status of a
/// script (the last one repeats): e.g. `[503, 200]` tests retries.
pub struct Recorder {
    /// `http://127.0.0.1:port`.
    pub url: String,
    /// What arrived.
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Recorder {
    /// Starts it on a free loopback port.
    pub fn start(statuses: Vec<u16>) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let url = format!("http://{}", listener.local_addr().unwrap_or_else(|e| panic!("{e}")));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for (i, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let status = statuses.get(i).or(statuses.last()).copied().unwrap_or(200);
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                reader.read_line(&mut line).unwrap_or(0);
                let mut parts = line.split_whitespace();
                let (method, path) = (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
                let (mut length, mut content_type) = (0, String::new());
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.trim_end().split_once(':') {
                        match name.trim().to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap_or(0),
                            "content-type" => content_type = value.trim().to_owned(),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Recorded {
                    method,
                    path,
                    content_type,
                    body,
                });
                let mut stream = reader.into_inner();
                let _ = write!(stream, "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Recorder { url, requests }
    }

    /// The requests so far.
    pub fn received(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}
