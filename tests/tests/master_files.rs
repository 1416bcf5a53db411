//! Files the master serves (`[files] root`, `file.managed source=halite://...`), on real
//! processes: a file larger than one message arrives whole and checked, an unchanged file is
//! not fetched again, and wrong digests, escapes and missing files are refused clearly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use halite_tests::Cluster;
use sha2::{Digest, Sha256};

/// More than the 16 MiB a message may carry, in bytes that do not compress.
fn big_content() -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..17 * 1024 * 1024 + 123)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn a_minion_copies_a_file_larger_than_a_message_from_the_master_and_checks_it() {
    let root = std::env::temp_dir().join(format!("halite-file-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("app")).unwrap();
    let big = big_content();
    std::fs::write(root.join("app/big.bin"), &big).unwrap();
    std::fs::write(root.join("app/site.conf"), "listen 80;\n").unwrap();
    std::fs::write(root.with_extension("secret"), "not served").unwrap();

    let mut cluster = Cluster::start(&format!("[files]\nroot = {root:?}\n"));
    cluster.enroll_minion("f1", "");
    cluster.wait_connected(&["f1"]);
    let out = cluster.dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let managed = |dest: &str, extra: &[&str]| {
        let name = format!("name={}", out.join(dest).display());
        let mut args = vec!["run", "--out", "json", "f1", "file.managed", name.as_str()];
        args.extend_from_slice(extra);
        let run = cluster.cli(&args);
        let doc = run.json();
        (run.code, doc["minions"]["f1"].clone())
    };

    let (code, minion) = managed("big.bin", &["source=halite://app/big.bin"]);
    assert_eq!(code, 0, "{minion}");
    assert_eq!(minion["state"], "returned", "{minion}");
    let written = std::fs::read(out.join("big.bin")).unwrap();
    assert!(written == big, "the copy differs: {} of {} bytes", written.len(), big.len());
    let digest = halite_protocol::hex::encode(&Sha256::digest(&big));
    assert!(minion.to_string().contains(&digest), "the digest is reported: {minion}");

    // The same file again: compared by digest, nothing to change.
    let (code, minion) = managed("big.bin", &["source=halite://app/big.bin", &format!("source_hash=sha256:{digest}")]);
    assert_eq!(code, 0, "{minion}");
    assert!(minion.to_string().contains("already in the correct state"), "{minion}");

    // A digest that is not the master's file's: refused, nothing written.
    let wrong = format!("source_hash=sha256:{}", "0".repeat(64));
    let (code, minion) = managed("site.conf", &["source=halite://app/site.conf", &wrong]);
    assert_ne!(code, 0);
    assert!(minion.to_string().contains("not the source_hash"), "{minion}");
    assert!(!out.join("site.conf").exists(), "nothing is written on a digest mismatch");
    let (code, minion) = managed("site.conf", &["source=halite://app/site.conf"]);
    assert_eq!(code, 0, "{minion}");
    assert_eq!(std::fs::read_to_string(out.join("site.conf")).unwrap(), "listen 80;\n");

    // Nothing outside the root, nothing that is not there.
    for (source, why) in [
        ("source=halite://../halite-file-root.secret", "may not contain '..'"),
        ("source=halite://app/missing", "no such file on the master"),
        ("source=halite://app", "not a regular file"),
    ] {
        let (code, minion) = managed("other", &[source]);
        assert_ne!(code, 0, "{source}");
        assert!(minion.to_string().contains(why), "{source}: {minion}");
    }
    assert!(!out.join("other").exists());
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(root.with_extension("secret"));
}

#[test]
fn a_master_without_a_file_root_says_so() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("f2", "");
    cluster.wait_connected(&["f2"]);
    let name = format!("name={}", cluster.dir.join("x").display());
    let run = cluster.cli(&["run", "--out", "json", "f2", "file.managed", &name, "source=halite://x"]);
    assert_ne!(run.code, 0);
    assert!(run.stdout.contains("[files] root is not set"), "{}", run.stdout);
}
