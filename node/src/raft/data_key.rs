//! Which encryption key a data directory belongs to. Mailboxes and sessions hold ids sealed
//! with the cluster's key; a directory written under another key (an `McpServer` deleted and
//! re-created with the same name finds its retained volumes, under a newly generated Secret)
//! would join old Raft state to a cluster that cannot open any of it. The first start records
//! the key's public fingerprint beside the data; a later start under another key refuses, and
//! says what to do, instead of mixing the two.

use super::error::RaftStoreError;
use std::path::Path;

/// The file, in the data directory, holding the fingerprint of the key the data belongs to.
pub const KEY_FILE: &str = "key-fingerprint";

/// Record `fingerprint` in `dir` on first use; refuse when the directory belongs to another key
/// than it or `previous` (a rotation under way: the record moves to the current key). A
/// directory with data but no record (written before records were kept) is claimed as is.
pub fn claim(dir: &Path, fingerprint: &str, previous: Option<&str>) -> Result<(), RaftStoreError> {
    let path = dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(found) if found.trim() == fingerprint => Ok(()),
        Ok(found) if Some(found.trim()) == previous => record(dir, fingerprint),
        Ok(found) => Err(RaftStoreError::ForeignData { dir: dir.to_path_buf(), found: found.trim().to_string(), ours: fingerprint.into() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => record(dir, fingerprint),
        Err(e) => Err(e.into()),
    }
}

/// Write the record beside, fsync, rename over: a crash leaves the old record or the new one.
fn record(dir: &Path, fingerprint: &str) -> Result<(), RaftStoreError> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{KEY_FILE}.tmp"));
    std::fs::write(&tmp, format!("{fingerprint}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(KEY_FILE))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_claims_the_directory_and_another_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        claim(dir.path(), "0a1b2c3d4e5f6071", None).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(KEY_FILE)).unwrap(), "0a1b2c3d4e5f6071\n");
        claim(dir.path(), "0a1b2c3d4e5f6071", None).expect("the same key again");
        let refused = claim(dir.path(), "ffffffffffffffff", None).unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("0a1b2c3d4e5f6071") && message.contains("ffffffffffffffff"), "{message}");
        assert!(message.contains("restore the Secret"), "says what to do: {message}");
        assert_eq!(std::fs::read_to_string(dir.path().join(KEY_FILE)).unwrap(), "0a1b2c3d4e5f6071\n", "the record is kept");
    }

    #[test]
    fn a_rotation_moves_the_record_to_the_new_key() {
        let dir = tempfile::tempdir().unwrap();
        claim(dir.path(), "0a1b2c3d4e5f6071", None).unwrap();
        // Phase 1 (the new key only accepted) leaves the record alone.
        claim(dir.path(), "0a1b2c3d4e5f6071", Some("ffffffffffffffff")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(KEY_FILE)).unwrap(), "0a1b2c3d4e5f6071\n");
        // Phase 2 (sealing with the new key, the old one accepted) moves it.
        claim(dir.path(), "ffffffffffffffff", Some("0a1b2c3d4e5f6071")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(KEY_FILE)).unwrap(), "ffffffffffffffff\n");
        // Once the old key is retired, the data still belongs to the new one.
        claim(dir.path(), "ffffffffffffffff", None).unwrap();
        assert!(claim(dir.path(), "0a1b2c3d4e5f6071", None).is_err());
    }

    #[test]
    fn a_directory_that_does_not_exist_yet_is_created_and_claimed() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("raft");
        claim(&data, "0a1b2c3d4e5f6071", None).unwrap();
        assert!(data.join(KEY_FILE).exists());
    }
}
