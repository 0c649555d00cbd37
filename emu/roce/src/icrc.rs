//! The RoCEv2 invariant CRC exactly as Linux rxe computes it (rxe_icrc.c; wire.md §1.4):
//! CRC-32 (IEEE, reflected) over 8×0xFF ‖ IPv4 header (TOS, TTL, checksum masked to ones) ‖
//! UDP header (checksum masked) ‖ BTH (byte 4 masked) ‖ rest up to the ICRC. The value is
//! written little-endian after the payload.

/// Bytes of pseudo-LRH that stand in for the IB local routing header.
const MASKED_LRH: [u8; 8] = [0xFF; 8];

/// ICRC of an IPv4 RoCEv2 packet: `ip_pkt` starts at the IPv4 header and ends just before the ICRC.
/// Returns the CRC value; the wire bytes are `value.to_le_bytes()`.
/// Packets too short for IPv4+UDP+BTH are hashed as-is after the masked prefix they have.
pub fn compute(ip_pkt: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&MASKED_LRH);
    let mut hdr = [0u8; 40];
    let n = ip_pkt.len().min(40);
    hdr[..n].copy_from_slice(&ip_pkt[..n]);
    if n == 40 {
        hdr[1] = 0xFF; // IPv4 TOS
        hdr[8] = 0xFF; // IPv4 TTL
        hdr[10] = 0xFF; // IPv4 header checksum
        hdr[11] = 0xFF;
        hdr[26] = 0xFF; // UDP checksum
        hdr[27] = 0xFF;
        hdr[32] = 0xFF; // BTH FECN/BECN/resv6
    }
    h.update(&hdr[..n]);
    h.update(&ip_pkt[n..]);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// wire.md §1.4 vector (scapy 2.8.0): RC SEND ONLY "ABCD" → ICRC bytes 41 f5 04 ab.
    #[test]
    fn icrc_vector_wire_md() {
        let pkt = unhex("45000030123440004011a535c0a80102c0a80101c12312b7001c00000400ffff00000011801234564142434441f504ab");
        let (body, crc) = pkt.split_at(pkt.len() - 4);
        assert_eq!(compute(body).to_le_bytes(), [0x41, 0xf5, 0x04, 0xab]);
        assert_eq!(crc, &[0x41, 0xf5, 0x04, 0xab]);
    }

    /// Masked fields do not change the ICRC; unmasked ones do.
    #[test]
    fn masking() {
        let pkt = unhex("45000030123440004011a535c0a80102c0a80101c12312b7001c00000400ffff00000011801234564142434441f504ab");
        let body = &pkt[..pkt.len() - 4];
        let base = compute(body);
        for idx in [1usize, 8, 10, 11, 26, 27, 32] {
            let mut m = body.to_vec();
            m[idx] ^= 0x5A;
            assert_eq!(compute(&m), base, "byte {idx} must be masked");
        }
        for idx in [0usize, 4, 12, 20, 24, 28, 33, 36, 39, 40] {
            let mut m = body.to_vec();
            m[idx] ^= 0x5A;
            assert_ne!(compute(&m), base, "byte {idx} must be covered");
        }
    }
}
