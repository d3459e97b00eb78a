//! adisk-storage
