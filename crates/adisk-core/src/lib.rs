//! adisk-core
