//! Seeds for the appliance's CSPRNGs (DH-HMAC-CHAP challenges and DH exponents): RDRAND
//! when the CPU has it (x86_64's checked wrapper, retried as Intel advises), mixed with
//! TSC samples; without RDRAND only TSC jitter, which is weak and said so on the console.

use x86_64::instructions::random::RdRand;

/// 32 bytes of seed material.
pub fn seed32() -> [u8; 32] {
    let mut out = [0u8; 32];
    let rd = RdRand::new();
    if rd.is_none() {
        log::warn!("entropy: no RDRAND; seeding from TSC jitter only (weak)");
    }
    for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
        let mut v = crate::time::rdtsc().rotate_left(17 * i as u32 + 7);
        if let Some(r) = rd {
            // RDRAND may transiently fail; 10 tries as Intel's DRNG guide suggests.
            if let Some(x) = (0..10).find_map(|_| r.get_u64()) {
                v ^= x;
            }
        }
        // A few TSC samples around a spin add jitter either way.
        for _ in 0..4 {
            let t0 = crate::time::rdtsc();
            core::hint::spin_loop();
            v = v.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ crate::time::rdtsc().wrapping_sub(t0);
        }
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    out
}
