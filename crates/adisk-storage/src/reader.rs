//! A Parquet [`ChunkReader`] over a local file that counts the bytes it reads.
use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file whose reads are counted in a shared counter.
#[derive(Clone)]
pub struct CountingFile {
    file: Arc<File>,
    len: u64,
    bytes_read: Arc<AtomicU64>,
}

impl CountingFile {
    /// Wraps `file`; reads are added to `bytes_read`.
    pub fn new(file: File, bytes_read: Arc<AtomicU64>) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(CountingFile {
            file: Arc::new(file),
            len,
            bytes_read,
        })
    }
}

impl Length for CountingFile {
    fn len(&self) -> u64 {
        self.len
    }
}

/// A `Read` at an offset that counts.
pub struct CountingRead {
    file: Arc<File>,
    offset: u64,
    bytes_read: Arc<AtomicU64>,
}

impl Read for CountingRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl ChunkReader for CountingFile {
    type T = CountingRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(CountingRead {
            file: self.file.clone(),
            offset: start,
            bytes_read: self.bytes_read.clone(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if start
            .checked_add(length as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(ParquetError::EOF(format!(
                "read of {length} bytes at {start} is past the end of a {}-byte file",
                self.len
            )));
        }
        let mut buf = vec![0u8; length];
        self.file
            .read_exact_at(&mut buf, start)
            .map_err(|e| ParquetError::External(Box::new(e)))?;
        self.bytes_read.fetch_add(length as u64, Ordering::Relaxed);
        Ok(buf.into())
    }
}

/// CRC-32 of a whole file, read in 1 MiB chunks.
pub fn file_crc32(file: &mut File) -> std::io::Result<(u32, u64)> {
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hasher.finalize(), total))
}
