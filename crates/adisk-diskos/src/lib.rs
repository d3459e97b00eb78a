//! adisk-diskos
