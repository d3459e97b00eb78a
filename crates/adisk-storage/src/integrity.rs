//! Checksums verified on every read.
//!
//! A partition's manifest entry carries a CRC-32 of every column chunk and one of the file's
//! tail (page index + footer) ([`PartitionChecksums`]). A scan reads the tail, verifies it and
//! decodes the metadata from the verified bytes; then, row group by row group, it reads the
//! projected column chunks whole, verifies each, and decodes from those bytes. Nothing is
//! decoded from bytes that were not verified in the same read, so a flip after the file was
//! first opened (bit rot keeps size and mtime) is [`StorageError::Corrupt`], never data.
//!
//! Parquet 59.3 verifies page CRCs when reading (`crc` feature) but cannot write them, and
//! the footer and page index have none; hence checksums of our own, in the manifest.
use crate::reader::CountingFile;
use crate::{Result, StorageError};
use adisk_core::protocol::PartitionChecksums;
use bytes::{Buf, Bytes};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::reader::{ChunkReader, Length};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Computes the checksums of a complete partition file whose metadata is `metadata`.
pub(crate) fn checksum_file(
    file: &std::fs::File,
    metadata: &ParquetMetaData,
) -> std::io::Result<PartitionChecksums> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let read = |start: u64, length: u64| -> std::io::Result<u32> {
        let mut buf = vec![0u8; length as usize];
        file.read_exact_at(&mut buf, start)?;
        Ok(crc32fast::hash(&buf))
    };
    let mut chunk_crc32 = Vec::with_capacity(metadata.num_row_groups());
    for rg in metadata.row_groups() {
        let crcs = rg
            .columns()
            .iter()
            .map(|c| c.byte_range())
            .map(|(start, length)| read(start, length))
            .collect::<std::io::Result<Vec<u32>>>()?;
        chunk_crc32.push(crcs);
    }
    let tail_offset = tail_offset(metadata).min(len);
    Ok(PartitionChecksums {
        tail_offset,
        tail_crc32: read(tail_offset, len - tail_offset)?,
        chunk_crc32,
    })
}

/// Where the column chunks end (the page index and the footer follow).
fn tail_offset(metadata: &ParquetMetaData) -> u64 {
    let chunks_end = metadata
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns())
        .map(|c| c.byte_range())
        .map(|(s, l)| s + l)
        .max();
    chunks_end.unwrap_or(4) // no row groups: just the magic before the footer
}

/// Byte ranges of a file read into memory and verified; a Parquet reader over it can read
/// nothing else.
pub struct VerifiedRanges {
    len: u64,
    ranges: Vec<(u64, Bytes)>,
}

impl VerifiedRanges {
    fn find(&self, start: u64, length: u64) -> parquet::errors::Result<Bytes> {
        for (offset, bytes) in &self.ranges {
            let end = offset + bytes.len() as u64;
            if start >= *offset && start.saturating_add(length) <= end {
                let from = (start - offset) as usize;
                return Ok(bytes.slice(from..from + length as usize));
            }
        }
        Err(ParquetError::General(format!(
            "read of {length} bytes at {start} is outside the verified ranges"
        )))
    }
}

impl Length for VerifiedRanges {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for VerifiedRanges {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        let (offset, bytes) = self
            .ranges
            .iter()
            .find(|(o, b)| start >= *o && start < o + b.len() as u64)
            .ok_or_else(|| {
                ParquetError::General(format!("read at {start} is outside the verified ranges"))
            })?;
        Ok(bytes.slice((start - offset) as usize..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.find(start, length as u64)
    }
}

/// What a scan reads a row group through: verified column chunks, or the file itself for a
/// partition written before checksums (verified whole when opened).
pub enum RowGroupBytes {
    /// Column chunks read and verified.
    Verified(VerifiedRanges),
    /// The file (no checksums in the manifest).
    File(CountingFile),
}

impl Length for RowGroupBytes {
    fn len(&self) -> u64 {
        match self {
            RowGroupBytes::Verified(v) => v.len(),
            RowGroupBytes::File(f) => f.len(),
        }
    }
}

impl ChunkReader for RowGroupBytes {
    type T = Box<dyn Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(match self {
            RowGroupBytes::Verified(v) => Box::new(v.get_read(start)?),
            RowGroupBytes::File(f) => Box::new(f.get_read(start)?),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match self {
            RowGroupBytes::Verified(v) => v.get_bytes(start, length),
            RowGroupBytes::File(f) => f.get_bytes(start, length),
        }
    }
}

/// An open partition file and the checksums its reads are verified against.
pub struct PartitionReader {
    file: CountingFile,
    path: PathBuf,
    checksums: Option<PartitionChecksums>,
}

impl PartitionReader {
    pub(crate) fn new(
        file: CountingFile,
        path: PathBuf,
        checksums: Option<PartitionChecksums>,
    ) -> Self {
        PartitionReader {
            file,
            path,
            checksums,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn corrupt(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }

    fn read_checked(
        &self,
        start: u64,
        length: u64,
        expected: u32,
        what: &str,
    ) -> Result<(u64, Bytes)> {
        let bytes = self
            .file
            .get_bytes(start, length as usize)
            .map_err(|e| self.corrupt(format!("reading the {what}: {e}")))?;
        let crc = crc32fast::hash(&bytes);
        if crc != expected {
            return Err(self.corrupt(format!("{what} (bytes {start}..{}) has CRC-32 {crc:08x} but the manifest says {expected:08x}", start + length)));
        }
        Ok((start, bytes))
    }

    /// The file's metadata (with the page index), decoded from its tail after verifying it.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the file if the tail does not match its checksum or
    /// does not decode.
    pub fn metadata(&self) -> Result<ArrowReaderMetadata> {
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
        let decoded = match &self.checksums {
            None => ArrowReaderMetadata::load(&self.file, options),
            Some(sums) => {
                if sums.tail_offset > self.file.len() {
                    return Err(self.corrupt(format!(
                        "the manifest's footer offset {} is past the end of the file",
                        sums.tail_offset
                    )));
                }
                let tail = self.read_checked(
                    sums.tail_offset,
                    self.file.len() - sums.tail_offset,
                    sums.tail_crc32,
                    "footer and page index",
                )?;
                ArrowReaderMetadata::load(
                    &VerifiedRanges {
                        len: self.file.len(),
                        ranges: vec![tail],
                    },
                    options,
                )
            }
        };
        decoded.map_err(|e| self.corrupt(format!("decoding the footer: {e}")))
    }

    /// The column chunks of row group `rg` selected by `mask`, read whole and verified.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the file and the chunk that does not match.
    pub fn row_group(
        &self,
        metadata: &ParquetMetaData,
        rg: usize,
        mask: &ProjectionMask,
    ) -> Result<RowGroupBytes> {
        let Some(sums) = &self.checksums else {
            return Ok(RowGroupBytes::File(self.file.clone()));
        };
        let columns = metadata.row_group(rg).columns();
        let crcs = sums.chunk_crc32.get(rg).filter(|c| {
            c.len() == columns.len() && sums.chunk_crc32.len() == metadata.num_row_groups()
        });
        let crcs = crcs.ok_or_else(|| {
            self.corrupt(format!(
                "the manifest's checksums do not match the file's {} row groups",
                metadata.num_row_groups()
            ))
        })?;
        let mut ranges = Vec::new();
        for (leaf, (column, crc)) in columns.iter().zip(crcs).enumerate() {
            if mask.leaf_included(leaf) {
                let (start, length) = column.byte_range();
                ranges.push(self.read_checked(
                    start,
                    length,
                    *crc,
                    &format!("column chunk {leaf} of row group {rg}"),
                )?);
            }
        }
        Ok(RowGroupBytes::Verified(VerifiedRanges {
            len: self.file.len(),
            ranges,
        }))
    }
}

/// Decodes every column of every row group through `reader` (verified, or not if it was opened
/// with [`crate::store::DiskStore::partition_reader_unverified`]); returns the rows. For
/// measuring what verification costs (`adisk bench checksum`).
pub fn decode_all(reader: &PartitionReader) -> Result<u64> {
    let meta = reader.metadata()?;
    let mut rows = 0u64;
    for rg in 0..meta.metadata().num_row_groups() {
        let bytes = reader.row_group(meta.metadata(), rg, &ProjectionMask::all())?;
        let decoded =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::new_with_metadata(
                bytes,
                meta.clone(),
            )
            .with_row_groups(vec![rg])
            .build()
            .map_err(|e| reader.corrupt(e.to_string()))?;
        for batch in decoded {
            rows += batch.map_err(|e| reader.corrupt(e.to_string()))?.num_rows() as u64;
        }
    }
    Ok(rows)
}
