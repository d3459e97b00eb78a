//! adisk-disk
