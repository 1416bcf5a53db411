//! Checks a SQLite write-ahead log before SQLite opens it. SQLite reads a log up to its first
//! frame that does not check out and silently ignores the rest: a log damaged in the middle (a
//! bad disk block, a partial copy) would start the master without every transaction after the
//! damage. A crash only ever tears the end of the log, so a *committed* frame of the same log
//! generation after a broken one means damage, not a crash. Format:
//! <https://www.sqlite.org/fileformat2.html#walformat>.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

const HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// Where the log stops checking out, when transactions are recorded after that point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// The first frame (from 1) that does not check out, or 0 for the log's header.
    pub frame: u64,
}

/// `Ok(None)` for a log SQLite will read whole (or that holds nothing committed past a torn
/// end), `Ok(Some(damage))` when committed transactions would be ignored.
pub(crate) fn check(path: &Path) -> io::Result<Option<Damage>> {
    let mut log = BufReader::new(File::open(path)?);
    let mut header = [0u8; HEADER];
    if !read_full(&mut log, &mut header)? {
        // Empty or shorter than a header: nothing in it.
        return Ok(None);
    }
    let magic = word(&header[0..4], true);
    let big_endian = match magic {
        0x377f_0682 => false,
        0x377f_0683 => true,
        _ => return Ok(Some(Damage { frame: 0 })),
    };
    let page_size = match word(&header[8..12], true) {
        1 => 65_536,
        n if n.is_power_of_two() && (512..=32_768).contains(&n) => n as usize,
        _ => return Ok(Some(Damage { frame: 0 })),
    };
    let salts = [word(&header[16..20], true), word(&header[20..24], true)];
    let mut sums = checksum((0, 0), &header[..24], big_endian);
    if sums != (word(&header[24..28], true), word(&header[28..32], true)) {
        // A header that does not check out makes SQLite ignore the whole log: damage if any
        // frame follows at all.
        let mut probe = [0u8; 1];
        return Ok(read_full(&mut log, &mut probe)?.then_some(Damage { frame: 0 }));
    }
    let mut frame = vec![0u8; FRAME_HEADER + page_size];
    let mut index = 0u64;
    let mut broken: Option<u64> = None;
    while read_full(&mut log, &mut frame)? {
        index += 1;
        let same_log = [word(&frame[8..12], true), word(&frame[12..16], true)] == salts;
        let committed = word(&frame[4..8], true) != 0;
        match broken {
            Some(at) => {
                if same_log && committed {
                    return Ok(Some(Damage { frame: at }));
                }
            }
            None => {
                let next = checksum(checksum(sums, &frame[..8], big_endian), &frame[FRAME_HEADER..], big_endian);
                if same_log && next == (word(&frame[16..20], true), word(&frame[20..24], true)) {
                    sums = next;
                } else {
                    broken = Some(index);
                }
            }
        }
    }
    Ok(None)
}

/// Fills `buf` completely; `false` if the file ended first (a partial last frame is a torn
/// write: SQLite ignores it, and so do we).
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..])? {
            0 => return Ok(false),
            n => filled += n,
        }
    }
    Ok(true)
}

fn word(bytes: &[u8], big_endian: bool) -> u32 {
    let bytes = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if big_endian {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    }
}

/// SQLite's log checksum, continued from `(s0, s1)` over `data` (a multiple of 8 bytes).
fn checksum((mut s0, mut s1): (u32, u32), data: &[u8], big_endian: bool) -> (u32, u32) {
    for pair in data.chunks_exact(8) {
        s0 = s0.wrapping_add(word(&pair[0..4], big_endian)).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..8], big_endian)).wrapping_add(s0);
    }
    (s0, s1)
}
