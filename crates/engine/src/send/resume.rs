//! Resuming an interrupted receive (OpenZFS's `receive -s`, `receive_resume_token`,
//! `send -t`, `receive -A`).
//!
//! A resumable receive keeps what it applied when it stops (an error, a cut connection, a
//! crash): the new file system of a full stream, or the hidden clone `FS/%recv` of an
//! incremental one, stays flagged inconsistent, and the pool keeps the position the receive
//! reached, committed in the same txg as the data it describes (`pool/receiving.rs`), with
//! this module's [`StreamDescription`]. The token the user reads from the property
//! `receive_resume_token` of FS carries both; `send -t TOKEN` finds the snapshot (and source)
//! by guid and sends the same stream from that position, with feature `RESUMING` and the
//! position in BEGIN, and the receiver checks that it continues exactly where it stopped.
//! `receive -A FS` abandons the partial receive.
//!
//! # Token
//! `1-` + 16 hex digits (the first 8 bytes of the BLAKE3 hash of the payload) + `-` + the
//! payload in hex: CBOR of [`ResumeToken`]. A token whose hash does not match, or that does
//! not decode, is refused with a clear error.

use serde::{Deserialize, Serialize};

use crate::dataset::props::RECEIVE_CLONE_NAME;
use crate::pool::{Pool, PoolError};

use super::stream::{Begin, FEATURE_COMPRESSED};
use super::SendError;

/// The token format's version, its first field.
const TOKEN_VERSION: &str = "1";

/// What identifies the stream a resumable receive is applying: kept in the pool beside its
/// position, and in the token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamDescription {
    pub to_guid: u64,
    /// 0 for a full stream.
    pub from_guid: u64,
    /// The sender's names, for messages and to find the snapshots.
    pub to_name: String,
    #[serde(default)]
    pub from_name: String,
    /// The stream carried blocks as stored (`send -c`): so does the rest.
    #[serde(default)]
    pub compressed: bool,
}

impl StreamDescription {
    pub fn of(begin: &Begin) -> StreamDescription {
        StreamDescription {
            to_guid: begin.to_guid,
            from_guid: begin.from_guid,
            to_name: begin.names.to_name.clone(),
            from_name: begin.names.from_name.clone(),
            compressed: begin.features & FEATURE_COMPRESSED != 0,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(self, &mut out).expect("CBOR into a Vec");
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<StreamDescription, SendError> {
        ciborium::from_reader(bytes).map_err(|error| {
            SendError::Refused(format!(
                "a saved receive's description does not decode: {error}"
            ))
        })
    }
}

/// Everything `send -t` needs: the stream and where the receiver stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeToken {
    pub stream: StreamDescription,
    pub object: u64,
    pub offset: u64,
}

fn checksum_hex(payload: &[u8]) -> String {
    hex(&blake3::hash(payload).as_bytes()[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).ok())
        .collect()
}

impl ResumeToken {
    pub fn encode(&self) -> String {
        let mut payload = Vec::new();
        ciborium::into_writer(self, &mut payload).expect("CBOR into a Vec");
        format!(
            "{TOKEN_VERSION}-{}-{}",
            checksum_hex(&payload),
            hex(&payload)
        )
    }

    pub fn decode(token: &str) -> Result<ResumeToken, SendError> {
        let bad = |why: &str| SendError::Refused(format!("not a valid resume token: {why}"));
        let mut parts = token.trim().splitn(3, '-');
        let (Some(version), Some(checksum), Some(payload)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("it has the form 1-CHECKSUM-PAYLOAD"));
        };
        if version != TOKEN_VERSION {
            return Err(bad(&format!(
                "version {version:?}, this build reads {TOKEN_VERSION}"
            )));
        }
        let payload = unhex(payload).ok_or_else(|| bad("its payload is not hexadecimal"))?;
        if checksum_hex(&payload) != checksum {
            return Err(bad("its checksum does not match (is it complete?)"));
        }
        ciborium::from_reader(payload.as_slice())
            .map_err(|error| bad(&format!("its payload does not decode: {error}")))
    }
}

/// The dataset a partial receive into `file_system` left, with its saved state: the hidden
/// clone of an incremental receive, or the file system itself for a full one.
fn partial_receive(
    pool: &Pool,
    file_system: &str,
) -> Result<Option<(String, crate::pool::receiving::ResumeState)>, SendError> {
    let clone = format!("{file_system}/{RECEIVE_CLONE_NAME}");
    for candidate in [clone.as_str(), file_system] {
        if !pool.has_dataset(candidate) || !pool.is_inconsistent(candidate)? {
            continue;
        }
        if let Some(state) = pool.receive_resume_state(candidate)? {
            return Ok(Some((candidate.to_string(), state)));
        }
    }
    Ok(None)
}

/// The `receive_resume_token` of `file_system`: set while a resumable receive into it is
/// stopped part-way.
pub fn resume_token(pool: &Pool, file_system: &str) -> Result<Option<String>, SendError> {
    let Some((_, state)) = partial_receive(pool, file_system)? else {
        return Ok(None);
    };
    Ok(Some(
        ResumeToken {
            stream: StreamDescription::decode(&state.description)?,
            object: state.object,
            offset: state.offset,
        }
        .encode(),
    ))
}

/// Refuse a new receive into `file_system` while a partial one waits there to be resumed
/// (as OpenZFS: resume it, or abandon it with `receive -A`).
pub(super) fn refuse_if_partial(pool: &Pool, file_system: &str) -> Result<(), SendError> {
    if partial_receive(pool, file_system)?.is_some() {
        return Err(SendError::Refused(format!(
            "{file_system} holds a partial receive (receive -s): resume it with send -t and its \
             receive_resume_token, or abandon it with receive -A {file_system}"
        )));
    }
    Ok(())
}

/// Where a resuming stream goes: the partial dataset, checked against the stream's BEGIN.
pub(super) fn resume_target(
    pool: &Pool,
    file_system: &str,
    begin: &Begin,
) -> Result<String, SendError> {
    let Some((partial, state)) = partial_receive(pool, file_system)? else {
        return Err(SendError::Refused(format!(
            "{file_system} has no partial receive to resume (receive -s keeps one)"
        )));
    };
    let saved = StreamDescription::decode(&state.description)?;
    if saved.to_guid != begin.to_guid || saved.from_guid != begin.from_guid {
        return Err(SendError::Refused(format!(
            "the stream resumes {} but {file_system}'s partial receive is of {}",
            begin.names.to_name, saved.to_name
        )));
    }
    if (state.object, state.offset) != (begin.names.resume_object, begin.names.resume_offset) {
        return Err(SendError::Refused(format!(
            "the stream resumes at object {} offset {}, but {file_system}'s partial receive \
             stopped at object {} offset {} (send again with its current \
             receive_resume_token)",
            begin.names.resume_object, begin.names.resume_offset, state.object, state.offset
        )));
    }
    Ok(partial)
}

/// Abandon the partial receive into `file_system` (`receive -A`): what it applied is
/// destroyed. Returns the dataset destroyed.
pub fn abort_receive(pool: &Pool, file_system: &str) -> Result<String, SendError> {
    let Some((partial, _)) = partial_receive(pool, file_system)? else {
        return Err(SendError::Refused(format!(
            "{file_system} has no partial receive to abort"
        )));
    };
    pool.destroy_dataset(&partial, true)?;
    Ok(partial)
}

/// The options of `send -t TOKEN`: the stream the token names, from its position. The
/// snapshot and source are found by guid (a renamed one still matches); the source may be a
/// bookmark.
pub fn resume_send_options(
    pool: &Pool,
    token: &str,
) -> Result<(String, super::SendOptions), SendError> {
    let token = ResumeToken::decode(token)?;
    // A guid is shared by a snapshot and its received copies: the one of the token's name
    // first, then one of the same file system, then any.
    let snapshots = pool.snapshots();
    let by_guid = |guid: u64, name: &str, file_system: &str| {
        let matching = || {
            snapshots
                .iter()
                .filter(move |snapshot| snapshot.guid == guid)
        };
        matching()
            .find(|snapshot| snapshot.name == name)
            .or_else(|| {
                matching().find(|snapshot| snapshot.name.split('@').next() == Some(file_system))
            })
            .or_else(|| matching().next())
            .cloned()
    };
    let named_file_system = token.stream.to_name.split('@').next().unwrap_or("");
    let to = by_guid(
        token.stream.to_guid,
        &token.stream.to_name,
        named_file_system,
    )
    .ok_or_else(|| {
        SendError::Pool(PoolError::DatasetNotFound(format!(
            "{} (guid {:#x}), the snapshot the token resumes",
            token.stream.to_name, token.stream.to_guid
        )))
    })?;
    let file_system = to.name.split_once('@').map_or("", |(fs, _)| fs);
    let from = match token.stream.from_guid {
        0 => None,
        guid => {
            let bookmark = || {
                pool.bookmarks_of(file_system)
                    .ok()?
                    .into_iter()
                    .find(|bookmark| bookmark.guid == guid)
                    .map(|bookmark| bookmark.name)
            };
            Some(
                by_guid(guid, &token.stream.from_name, file_system)
                    .filter(|snapshot| snapshot.name.split('@').next() == Some(file_system))
                    .map(|snapshot| snapshot.name)
                    .or_else(bookmark)
                    .ok_or_else(|| {
                        SendError::Pool(PoolError::DatasetNotFound(format!(
                            "{} (guid {guid:#x}), the source the token resumes from",
                            token.stream.from_name
                        )))
                    })?,
            )
        }
    };
    Ok((
        to.name,
        super::SendOptions {
            from,
            compressed: token.stream.compressed,
            resume_at: Some((token.object, token.offset)),
            ..super::SendOptions::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> ResumeToken {
        ResumeToken {
            stream: StreamDescription {
                to_guid: 0x1234,
                from_guid: 7,
                to_name: "tank/fs@b".into(),
                from_name: "tank/fs@a".into(),
                compressed: true,
            },
            object: 42,
            offset: 1 << 20,
        }
    }

    #[test]
    fn a_token_round_trips() {
        let text = token().encode();
        assert!(text.starts_with("1-"));
        assert_eq!(ResumeToken::decode(&text).unwrap(), token());
    }

    #[test]
    fn damaged_tokens_are_refused() {
        let text = token().encode();
        let mut flipped = text.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        for bad in [
            String::new(),
            "1-".into(),
            "2".to_string() + &text[1..],
            String::from_utf8(flipped).unwrap(),
            text[..text.len() - 2].to_string(),
            text.replace('-', "_"),
            format!("{}-zz", &text[..19]),
        ] {
            let error = ResumeToken::decode(&bad).unwrap_err().to_string();
            assert!(error.contains("resume token"), "{bad}: {error}");
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,200}") {
            let _ = ResumeToken::decode(&text);
        }
    }

    // The saved receive's description is CBOR in a dataset's property; mutated, it is refused
    // or decodes to something that encodes the same way (docs/design/invariants.md §6, invariant
    // 6).
    proptest::proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn stream_description_decoder_never_panics(mutations in crate::fuzz::mutations()) {
            let bytes = crate::fuzz::mutate(token().stream.encode(), &mutations);
            if let Ok(description) = StreamDescription::decode(&bytes) {
                let again = StreamDescription::decode(&description.encode()).unwrap();
                proptest::prop_assert_eq!(again, description);
            }
        }

        #[test]
        fn stream_description_decoder_on_arbitrary_bytes_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let _ = StreamDescription::decode(&bytes);
        }
    }
}
