//! Byte streams over the daemon's socket, for `send` and `receive`: after the request line
//! (`receive`) or before the response line (`send`), the stream travels as frames, each a u32
//! little-endian length and that many bytes; a frame of length 0 ends it. So the stream and
//! the JSON lines never mix, and the side reading the stream knows where it ends even when the
//! other side stopped part-way (a connection closed inside a frame is a truncated stream).

use std::io::{self, Read, Write};

/// The largest frame a writer makes and a reader accepts.
pub const FRAME_MAX: usize = 1 << 20;

/// Writes a byte stream as frames; [`FrameWriter::finish`] writes the end frame.
pub struct FrameWriter<W: Write> {
    out: W,
    buffer: Vec<u8>,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(out: W) -> FrameWriter<W> {
        FrameWriter {
            out,
            buffer: Vec::with_capacity(FRAME_MAX),
        }
    }

    fn emit(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.out
            .write_all(&(self.buffer.len() as u32).to_le_bytes())?;
        self.out.write_all(&self.buffer)?;
        self.buffer.clear();
        Ok(())
    }

    /// Write what is buffered and the end frame.
    pub fn finish(mut self) -> io::Result<W> {
        self.emit()?;
        self.out.write_all(&0u32.to_le_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> Write for FrameWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = FRAME_MAX - self.buffer.len();
        let taken = room.min(data.len());
        self.buffer.extend_from_slice(&data[..taken]);
        if self.buffer.len() == FRAME_MAX {
            self.emit()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.emit()?;
        self.out.flush()
    }
}

/// Reads a framed byte stream: [`Read`] returns 0 at the end frame; a connection that closes
/// before it is an `UnexpectedEof` error.
pub struct FrameReader<R: Read> {
    input: R,
    /// Bytes left in the current frame.
    left: usize,
    ended: bool,
}

impl<R: Read> FrameReader<R> {
    pub fn new(input: R) -> FrameReader<R> {
        FrameReader {
            input,
            left: 0,
            ended: false,
        }
    }

    /// Whether the end frame was read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Read and drop the rest of the stream, up to its end frame.
    pub fn drain(&mut self) -> io::Result<u64> {
        io::copy(self, &mut io::sink())
    }
}

impl<R: Read> Read for FrameReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ended || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut length = [0u8; 4];
            self.input.read_exact(&mut length)?;
            let length = u32::from_le_bytes(length) as usize;
            if length == 0 {
                self.ended = true;
                return Ok(0);
            }
            if length > FRAME_MAX {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a frame of {length} bytes (at most {FRAME_MAX})"),
                ));
            }
            self.left = length;
        }
        let want = self.left.min(buf.len());
        let read = self.input.read(&mut buf[..want])?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed inside a frame",
            ));
        }
        self.left -= read;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_end_where_the_writer_finished() {
        let data: Vec<u8> = (0..(3 * FRAME_MAX + 123)).map(|i| i as u8).collect();
        let mut writer = FrameWriter::new(Vec::new());
        writer.write_all(&data).unwrap();
        let mut framed = writer.finish().unwrap();
        framed.extend_from_slice(b"{\"after\": 1}\n");
        let mut input = framed.as_slice();
        let mut reader = FrameReader::new(&mut input);
        let mut back = Vec::new();
        reader.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        assert!(reader.ended());
        let mut rest = Vec::new();
        input.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"{\"after\": 1}\n");
    }

    #[test]
    fn a_stream_cut_inside_a_frame_or_before_its_end_is_an_error() {
        let mut writer = FrameWriter::new(Vec::new());
        writer.write_all(&[7u8; 5000]).unwrap();
        let framed = writer.finish().unwrap();
        for cut in [2, 100, framed.len() - 4] {
            let mut reader = FrameReader::new(&framed[..cut]);
            let mut back = Vec::new();
            assert!(reader.read_to_end(&mut back).is_err(), "cut at {cut}");
        }
        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(FrameReader::new(huge.as_slice())
            .read_to_end(&mut Vec::new())
            .is_err());
    }
}
