//! The minion's append-only state file: one record per fact, each checksummed.
//!
//! A record is `len: u32 LE | crc32: u32 LE | kind: u8 | jid_len: u8 | jid | body`, where `len`
//! counts the bytes after the checksum and the CRC-32 (IEEE) covers them. Appending one record
//! is one `pwrite` (and one `fdatasync` when it must be durable), where a file per fact costs a
//! create, a sync of the file and a sync of its directory: the difference is most of a job's
//! cost on a minion.
//!
//! Reading is forgiving: a record cut short by a crash ends the file (it was never synced, so
//! nothing was acknowledged on it); a whole record that fails its checksum is reported with
//! what its header still says, so the caller can err on the safe side (a damaged "started"
//! still counts as started), and reading goes on at the next record that checks.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The jid started here.
    Started = 1,
    /// The jid's return (its encoded message in the body), not yet acknowledged.
    Return = 2,
    /// The master acknowledged the jid's return.
    Acked = 3,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::Started),
            2 => Some(Kind::Return),
            3 => Some(Kind::Acked),
            _ => None,
        }
    }
}

/// Bytes before a record's payload: its length and checksum.
const HEADER: usize = 8;

/// The largest payload a record may claim: far above any return a message can carry, so a
/// damaged length is recognised without reading (or allocating) past it.
pub(crate) const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

/// One record read back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    Intact {
        kind: Kind,
        jid: String,
        body: Vec<u8>,
    },
    /// A record that fails its checksum, with what its header seems to say (either may be
    /// wrong: that is the damage).
    Damaged {
        kind: Option<Kind>,
        jid: Option<String>,
    },
}

/// What a scan of the file found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub records: Vec<Read>,
    /// Where the last intact record ends: past it is a torn write (or nothing).
    pub end: u64,
    /// Whether anything was damaged or skipped before `end`.
    pub damaged: bool,
}

/// Appends `kind | jid | body` as one record to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, kind: Kind, jid: &str, body: &[u8]) {
    // Jids are validated ids (at most 128 bytes): the length always fits a byte.
    let jid_len = u8::try_from(jid.len()).unwrap_or(u8::MAX);
    let jid = &jid.as_bytes()[..usize::from(jid_len)];
    let len = 2 + jid.len() + body.len();
    let start = out.len();
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.push(jid_len);
    out.extend_from_slice(jid);
    out.extend_from_slice(body);
    let crc = crc32(&out[start + HEADER..]);
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

/// The little-endian `u32` at `at`, if the bytes reach that far.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The payload length a record starting at `at` declares, if it is a believable one.
fn declared_len(bytes: &[u8], at: usize) -> Option<usize> {
    u32_at(bytes, at).map(|len| len as usize).filter(|len| (2..=MAX_PAYLOAD).contains(len))
}

/// The record starting at `at`, if one is intact there: its payload and where it ends.
fn intact_at(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = declared_len(bytes, at)?;
    let payload = bytes.get(at + HEADER..at + HEADER + len)?;
    (crc32(payload) == u32_at(bytes, at + 4)?).then_some((payload, at + HEADER + len))
}

/// `kind`, `jid` and body of a payload, as far as they make sense.
fn fields(payload: &[u8]) -> (Option<Kind>, Option<String>, &[u8]) {
    let kind = payload.first().copied().and_then(Kind::from_byte);
    let jid_len = payload.get(1).copied().map_or(0, usize::from);
    let jid = payload
        .get(2..2 + jid_len)
        .and_then(|b| std::str::from_utf8(b).ok())
        .filter(|jid| halite_protocol::id::validate(jid).is_ok())
        .map(str::to_owned);
    let body = payload.get(2 + jid_len..).unwrap_or_default();
    (kind, jid, body)
}

/// Reads every record of `bytes` (a whole file).
pub(crate) fn scan(bytes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut at = 0;
    while at < bytes.len() {
        if let Some((payload, next)) = intact_at(bytes, at) {
            match fields(payload) {
                (Some(kind), Some(jid), body) => scan.records.push(Read::Intact { kind, jid, body: body.to_vec() }),
                (kind, jid, _) => {
                    scan.records.push(Read::Damaged { kind, jid });
                    scan.damaged = true;
                }
            }
            at = next;
            scan.end = at as u64;
            continue;
        }
        // Not a record here. If one checks further on, this one was damaged in place;
        // otherwise the file ends with a write a crash cut short.
        let Some(resume) = (at + 1..bytes.len()).find(|&i| intact_at(bytes, i).is_some()) else {
            // The last record: cut short, it is a write a crash interrupted (never synced, so
            // never acted on); whole but failing its checksum, it is damage, reported.
            if declared_len(bytes, at).is_some_and(|len| at + HEADER + len == bytes.len()) {
                let (kind, jid, _) = fields(&bytes[at + HEADER..]);
                scan.records.push(Read::Damaged { kind, jid });
                scan.damaged = true;
                scan.end = bytes.len() as u64;
            }
            break;
        };
        let (kind, jid, _) = fields(bytes.get(at + HEADER..resume).unwrap_or_default());
        scan.records.push(Read::Damaged { kind, jid });
        scan.damaged = true;
        at = resume;
    }
    scan
}

/// Writes `record` (whole encoded records) at `at` in `file`, synced when `durable`. On
/// failure nothing of it counts: the file is cut back to `at`, and a part that stays (the cut
/// failing too) is overwritten by the next record, or read back as a torn end.
pub(crate) fn write_at(file: &File, at: u64, record: &[u8], durable: bool) -> io::Result<()> {
    let written = file.write_all_at(record, at).and_then(|()| if durable { file.sync_data() } else { Ok(()) });
    if written.is_err() {
        let _ = file.set_len(at);
    }
    written
}

/// CRC-32 (IEEE 802.3, reflected), table-driven.
fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !bytes.iter().fold(!0u32, |c, &b| TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: Kind, jid: &str, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, kind, jid, body);
        out
    }

    fn intact(kind: Kind, jid: &str, body: &[u8]) -> Read {
        Read::Intact { kind, jid: jid.into(), body: body.to_vec() }
    }

    #[test]
    fn the_checksum_is_crc32_ieee() {
        // The check value every CRC-32 implementation publishes.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn records_read_back_as_written() {
        let mut file = record(Kind::Started, "j1", b"");
        file.extend(record(Kind::Return, "j1", b"the return"));
        file.extend(record(Kind::Acked, "j1", b""));
        let scan = scan(&file);
        assert_eq!(
            scan.records,
            vec![
                intact(Kind::Started, "j1", b""),
                intact(Kind::Return, "j1", b"the return"),
                intact(Kind::Acked, "j1", b"")
            ]
        );
        assert_eq!(scan.end, file.len() as u64);
        assert!(!scan.damaged);
    }

    /// A write cut short anywhere leaves the records before it, and a clean end.
    #[test]
    fn a_torn_last_record_ends_the_file() {
        let first = record(Kind::Started, "j1", b"");
        let second = record(Kind::Return, "j1", b"a return of some length");
        for cut in 0..second.len() {
            let mut file = first.clone();
            file.extend(&second[..cut]);
            let scan = scan(&file);
            assert_eq!(scan.records, vec![intact(Kind::Started, "j1", b"")], "cut at {cut}");
            assert_eq!(scan.end, first.len() as u64);
            assert!(!scan.damaged);
        }
    }

    /// A flipped bit in the middle costs that record only, which is reported with its header.
    #[test]
    fn a_damaged_record_is_reported_and_the_rest_kept() {
        let first = record(Kind::Started, "j1", b"");
        let second = record(Kind::Return, "j2", b"a return of some length");
        let third = record(Kind::Started, "j3", b"");
        for flip in 0..second.len() {
            let mut file = first.clone();
            file.extend(&second);
            file.extend(&third);
            file[first.len() + flip] ^= 0x10;
            let scan = scan(&file);
            assert!(scan.damaged, "flip at {flip}");
            assert_eq!(scan.records.first(), Some(&intact(Kind::Started, "j1", b"")), "flip at {flip}");
            assert_eq!(scan.records.last(), Some(&intact(Kind::Started, "j3", b"")), "flip at {flip}");
            assert_eq!(scan.end, file.len() as u64);
            // Damage in the body leaves the header naming the jid.
            if flip >= HEADER + 4 {
                assert!(
                    scan.records.contains(&Read::Damaged { kind: Some(Kind::Return), jid: Some("j2".into()) }),
                    "flip at {flip}: {:?}",
                    scan.records
                );
            }
        }
    }

    #[test]
    fn a_damaged_last_record_is_reported() {
        let mut file = record(Kind::Started, "j1", b"");
        let start = file.len();
        file.extend(record(Kind::Return, "j2", b"a return of some length"));
        file[start + 20] ^= 0x01;
        let scan = scan(&file);
        assert!(scan.damaged);
        assert_eq!(
            scan.records,
            vec![intact(Kind::Started, "j1", b""), Read::Damaged { kind: Some(Kind::Return), jid: Some("j2".into()) }]
        );
    }

    #[test]
    fn a_huge_length_is_not_believed() {
        let mut file = vec![0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0];
        file.extend(record(Kind::Started, "j1", b""));
        let scan = scan(&file);
        assert_eq!(scan.records.last(), Some(&intact(Kind::Started, "j1", b"")));
    }
}
