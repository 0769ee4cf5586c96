//! The copies rule of `write_copies`: file data gets the dataset's `copies`, metadata one more.

use super::*;

/// Issue 8: directories, master nodes and unlinked sets (key/value objects) took the file
/// `copies` setting, so one bad block lost a directory or the whole pool.
#[test]
fn metadata_gets_one_more_copy_than_file_data() {
    for copies in 1..=3u8 {
        assert_eq!(write_copies(ObjectType::PlainFile, 0, copies), copies);
        let more = (copies + 1).min(COPIES_MAX);
        assert_eq!(write_copies(ObjectType::PlainFile, 1, copies), more);
        for object_type in [
            ObjectType::KeyValue,
            ObjectType::Dnode,
            ObjectType::Objset,
            ObjectType::BlockPtrList,
            ObjectType::SpaceMap,
            ObjectType::DatasetDir,
            ObjectType::Dataset,
        ] {
            assert_eq!(
                write_copies(object_type, 0, copies),
                more,
                "{object_type:?}"
            );
        }
    }
    assert_eq!(write_copies(ObjectType::PlainFile, 0, 9), COPIES_MAX);
}
