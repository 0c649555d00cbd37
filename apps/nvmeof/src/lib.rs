//! (skeleton: filled in by its issue)
#![no_std]
