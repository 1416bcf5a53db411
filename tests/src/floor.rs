//! The floor of a sequential job on this machine: the least one job can cost, measured rather
//! than argued. Three processes pass a job-sized message client → master → minion → master →
//! client over loopback TCP, with exactly the work no design can skip on that path: the master
//! signs the job (ed25519) and commits it to SQLite (WAL, `synchronous=NORMAL`, as the master's
//! store), the minion verifies the signature and appends its run-once marker to a journal,
//! synced (as its outbox does). Nothing else: no encryption, no framing beyond a length, no
//! async runtime. Halite's sequential rate is reported against it (`bench-cluster`).
//!
//! The three roles are one binary (`bench-floor`), started as `--role master` and
//! `--role minion` children by [`measure`].

// A benchmark's processes: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use halite_protocol::identity::IdentityKey;

/// The signature's domain, as a job's.
const DOMAIN: &[u8] = b"halite-floor-job";
/// About the size of a signed `test.ping` job message and of its return.
const JOB_BYTES: usize = 320;
const RETURN_BYTES: usize = 200;

/// Jobs per second over `jobs` sequential jobs (after a warm-up), with the children's state
/// (database, journal) in `dir`.
pub fn measure(bin_dir: &Path, dir: &Path, jobs: u32) -> f64 {
    std::fs::create_dir_all(dir).expect("the floor's directory");
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the floor's master");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    let exe = bin_dir.join("bench-floor");
    let spawn = |role: &str| -> Child {
        Command::new(&exe)
            .args(["--role", role, "--port", &port.to_string(), "--dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", exe.display()))
    };
    let mut master = spawn("master");
    // The master takes the client first, then the minion.
    let mut client = connect(port);
    let mut minion = spawn("minion");
    let job = vec![7u8; JOB_BYTES];
    let mut reply = Vec::new();
    let mut one = |client: &mut TcpStream| {
        write_frame(client, &job);
        read_frame(client, &mut reply).expect("the floor's return");
    };
    for _ in 0..jobs / 10 {
        one(&mut client);
    }
    let start = Instant::now();
    for _ in 0..jobs {
        one(&mut client);
    }
    let rate = f64::from(jobs) / start.elapsed().as_secs_f64();
    drop(client);
    let _ = master.wait();
    let _ = minion.wait();
    rate
}

/// A child's part: `--role master|minion --port P --dir D`.
pub fn serve_role(args: &[String]) {
    let value = |flag: &str| {
        args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| {
            eprintln!("bench-floor: {flag} is missing (it is started by bench-floor itself)");
            std::process::exit(2)
        })
    };
    let port: u16 = value("--port").parse().expect("a port");
    let dir = std::path::PathBuf::from(value("--dir"));
    match value("--role").as_str() {
        "master" => master(port, &dir),
        "minion" => minion(port, &dir),
        other => panic!("no role {other}"),
    }
}

/// Accepts the client, then the minion; per job: sign, commit, to the minion, and its return
/// back to the client.
fn master(port: u16, dir: &Path) {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the floor master's port");
    let mut client = accepted(&listener);
    let mut minion = accepted(&listener);
    let db_path = dir.join("floor.db");
    let _ = std::fs::remove_file(&db_path);
    let db = rusqlite::Connection::open(&db_path).expect("the floor's database");
    db.pragma_update(None, "journal_mode", "WAL").expect("WAL");
    db.pragma_update(None, "synchronous", "NORMAL").expect("synchronous");
    db.execute("CREATE TABLE jobs (jid INTEGER PRIMARY KEY, body BLOB NOT NULL)", []).expect("the table");
    let mut insert = db.prepare("INSERT INTO jobs (jid, body) VALUES (?1, ?2)").expect("the insert");
    let key = IdentityKey::from_seed(&[3; 32]);
    let (mut job, mut ret) = (Vec::new(), Vec::new());
    let mut jid: i64 = 0;
    while read_frame(&mut client, &mut job).is_some() {
        jid += 1;
        let signature = key.sign(DOMAIN, &job);
        insert.execute(rusqlite::params![jid, &job]).expect("the commit");
        job.extend_from_slice(&signature);
        write_frame(&mut minion, &job);
        read_frame(&mut minion, &mut ret).expect("the minion's return");
        write_frame(&mut client, &ret);
    }
}

/// Per job: verify, append the marker and sync it, answer.
fn minion(port: u16, dir: &Path) {
    let mut master = connect(port);
    let public = IdentityKey::from_seed(&[3; 32]).public();
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dir.join("floor.journal"))
        .expect("the floor's journal");
    let mut job = Vec::new();
    let ret = vec![9u8; RETURN_BYTES];
    while read_frame(&mut master, &mut job).is_some() {
        let (body, signature) = job.split_at(job.len() - 64);
        public.verify(DOMAIN, body, signature).expect("a signature the master made");
        journal.write_all(&body[..32]).and_then(|()| journal.sync_data()).expect("the journal");
        write_frame(&mut master, &ret);
    }
}

fn accepted(listener: &TcpListener) -> TcpStream {
    let (stream, _) = listener.accept().expect("a connection");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => {
                stream.set_nodelay(true).expect("nodelay");
                return stream;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(error) => panic!("the floor's master on port {port}: {error}"),
        }
    }
}

fn write_frame(stream: &mut TcpStream, body: &[u8]) {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame).expect("a frame out");
}

/// The next frame into `into`; `None` at the end of the stream.
fn read_frame(stream: &mut TcpStream, into: &mut Vec<u8>) -> Option<()> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).ok()?;
    into.resize(u32::from_be_bytes(len) as usize, 0);
    stream.read_exact(into).ok()
}
