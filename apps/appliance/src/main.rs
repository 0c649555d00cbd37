//! The bootable appliance image (skeleton: filled in by the platform issue).
#![no_std]
#![no_main]
