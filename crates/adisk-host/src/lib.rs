//! adisk-host
