//! adisk-sim
