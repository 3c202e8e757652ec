//! The classifier's shared learn stream (filled in below).
