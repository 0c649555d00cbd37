//! The adapter's layouts as data: one table of (name, bit offset, bit width) per structure.
//!
//! Bit offsets count from the most significant bit of byte 0 of the structure, the way the
//! `mlx5_ifc_*_bits` pseudo-structs in Linux `include/linux/mlx5/mlx5_ifc.h` (and rdma-core
//! `providers/mlx5/mlx5_ifc.h`) lay them out; names are those of the headers. Every value is
//! big-endian. Offsets were transcribed from those headers (facts); the code is ours.
//! Where the model needs only a few fields of a structure, only those are declared.

/// One field of a big-endian bit-packed structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    /// Offset of the field's most significant bit from the MSB of byte 0.
    pub bit: usize,
    /// Width in bits (1..=64, or a multiple of 8 for byte arrays).
    pub width: usize,
}

impl Field {
    /// Byte offset of the field's first byte.
    pub const fn byte(&self) -> usize {
        self.bit / 8
    }
    /// The same field inside a structure embedded at `byte_off`.
    pub const fn at(self, byte_off: usize) -> Field {
        Field { name: self.name, bit: self.bit + byte_off * 8, width: self.width }
    }
}

/// Read a field (up to 64 bits). Bytes past the end of `buf` read as zero.
pub fn get(buf: &[u8], f: Field) -> u64 {
    debug_assert!(f.width <= 64);
    if f.bit.is_multiple_of(8) && f.width.is_multiple_of(8) {
        let mut v = 0u64;
        for i in 0..f.width / 8 {
            v = (v << 8) | *buf.get(f.bit / 8 + i).unwrap_or(&0) as u64;
        }
        return v;
    }
    let mut v = 0u64;
    for i in 0..f.width {
        let b = f.bit + i;
        let bit = buf.get(b / 8).map(|x| (x >> (7 - b % 8)) & 1).unwrap_or(0);
        v = (v << 1) | bit as u64;
    }
    v
}

/// Write a field (up to 64 bits); higher bits of `v` are dropped. Panics past the end of `buf`.
pub fn set(buf: &mut [u8], f: Field, v: u64) {
    debug_assert!(f.width <= 64);
    for i in 0..f.width {
        let b = f.bit + i;
        let bit = (v >> (f.width - 1 - i)) & 1;
        let m = 1u8 << (7 - b % 8);
        if bit == 1 {
            buf[b / 8] |= m;
        } else {
            buf[b / 8] &= !m;
        }
    }
}

/// Bytes of a byte-aligned array field.
pub fn bytes(buf: &[u8], f: Field) -> &[u8] {
    &buf[f.byte()..f.byte() + f.width / 8]
}

macro_rules! layout {
    ($(#[$m:meta])* $name:ident, $size:expr, { $($f:ident : $bit:expr, $w:expr;)* }) => {
        $(#[$m])*
        #[allow(non_upper_case_globals, dead_code)]
        pub mod $name {
            use super::Field;
            /// Size of the structure in bytes.
            pub const SIZE: usize = $size;
            $(pub const $f: Field = Field { name: concat!(stringify!($name), ".", stringify!($f)), bit: $bit, width: $w };)*
            /// Every declared field, in order.
            pub const ALL: &[Field] = &[$($f),*];
        }
    };
}

layout!(
    /// Initialization segment at BAR0 offset 0 [device.h mlx5_init_seg].
    init_seg, 0x1014, {
    fw_rev_minor: 0x00, 16; fw_rev_major: 0x10, 16;
    cmdif_rev: 0x20, 16; fw_rev_subminor: 0x30, 16;
    cmdq_addr_h: 0x80, 32; cmdq_addr_l: 0xa0, 20; nic_interface: 0xb5, 3;
    log_cmdq_size: 0xb8, 4; log_cmdq_stride: 0xbc, 4;
    cmd_dbell: 0xc0, 32;
    initializing: 0x1fc * 8, 1;
    health_fw_ver: 0x230 * 8, 32; health_hw_id: 0x234 * 8, 32;
    health_rfr: 0x238 * 8, 1; health_irisc_index: 0x23c * 8, 8; health_synd: 0x23d * 8, 8;
    health_ext_synd: 0x23e * 8, 16;
    internal_timer_h: 0x1000 * 8, 32; internal_timer_l: 0x1004 * 8, 32;
    health_counter: 0x1010 * 8 + 8, 24;
});

layout!(
    /// Command queue entry [device.h mlx5_cmd_layout].
    cmd_layout, 64, {
    type_: 0, 8; inlen: 0x20, 32; in_ptr: 0x40, 64;
    in_data: 0x80, 128; out_data: 0x100, 128; out_ptr: 0x180, 64; outlen: 0x1c0, 32;
    token: 0x1e0, 8; sig: 0x1e8, 8; status: 0x1f8, 7; ownership: 0x1ff, 1;
});

layout!(
    /// Command mailbox block [device.h mlx5_cmd_prot_block].
    cmd_mailbox, 0x240, {
    data: 0, 512 * 8; next: 0x230 * 8, 64; block_num: 0x238 * 8, 32;
    token: 0x23d * 8, 8; ctrl_sig: 0x23e * 8, 8; sig: 0x23f * 8, 8;
});

layout!(
    /// Common head of every command input [mlx5_ifc.h, e.g. enable_hca_in].
    cmd_in, 16, { opcode: 0, 16; uid: 0x10, 16; op_mod: 0x30, 16; });

layout!(
    /// Common head of every command output.
    cmd_out, 16, { status: 0, 8; syndrome: 0x20, 32; });

layout!(enable_hca_in, 16, { embedded_cpu_function: 0x40, 1; function_id: 0x50, 16; });
layout!(query_issi_out, 0x70, { current_issi: 0x50, 16; supported_issi_dw0: 0x360, 32; });
layout!(set_issi_in, 16, { current_issi: 0x50, 16; });
layout!(query_pages_out, 16, { embedded_cpu_function: 0x40, 1; function_id: 0x50, 16; num_pages: 0x60, 32; });
layout!(manage_pages_in, 16, { function_id: 0x50, 16; input_num_entries: 0x60, 32; pas: 0x80, 64; });
layout!(manage_pages_out, 16, { output_num_entries: 0x40, 32; pas: 0x80, 64; });
layout!(query_hca_cap_in, 16, { other_function: 0x40, 1; function_id: 0x50, 16; });
layout!(query_hca_cap_out, 0x1010, { capability: 0x80, 0x1000 * 8; });
layout!(set_hca_cap_in, 0x1010, { capability: 0x80, 0x1000 * 8; });
layout!(teardown_hca_in, 16, { profile: 0x50, 16; });
layout!(teardown_hca_out, 16, { state: 0x7f, 1; });
layout!(access_register_in, 16, { register_id: 0x50, 16; argument: 0x60, 32; register_data: 0x80, 32; });
layout!(host_endianness_reg, 16, { he: 0, 1; });
layout!(pmtu_reg, 16, { local_port: 0x08, 8; max_mtu: 0x20, 16; admin_mtu: 0x40, 16; oper_mtu: 0x60, 16; });
// Objects whose id sits at 0x08[23:0] (ALLOC_UAR out, DEALLOC_UAR in, ALLOC_PD out, ...).
layout!(obj_id_24, 16, { id: 0x48, 24; });
layout!(create_eq_out, 16, { eq_number: 0x58, 8; });
layout!(destroy_eq_in, 16, { eq_number: 0x58, 8; });
layout!(query_special_contexts_out, 0x20, {
    dump_fill_mkey: 0x40, 32; resd_lkey: 0x60, 32; null_mkey: 0x80, 32;
});

layout!(
    /// General device capabilities [mlx5_ifc.h cmd_hca_cap].
    cmd_hca_cap, 0x1000, {
    log_max_srq_sz: 0x80, 8; log_max_qp_sz: 0x88, 8; log_max_qp: 0x9b, 5;
    log_max_srq: 0xab, 5;
    log_max_cq_sz: 0xc8, 8; log_max_cq: 0xdb, 5;
    log_max_eq_sz: 0xe0, 8; log_max_mkey: 0xea, 6; log_max_eq: 0xfc, 4;
    force_teardown: 0x110, 1; fast_teardown: 0x111, 1; log_max_klm_list_size: 0x11a, 6;
    log_max_ra_req_qp: 0x14a, 6; log_max_ra_res_qp: 0x15a, 6;
    end_pad: 0x160, 1; cache_line_128byte: 0x164, 1; gid_table_size: 0x170, 16;
    pkey_table_size: 0x190, 16;
    nic_flow_table: 0x1a6, 1; port_type: 0x1b6, 2; num_ports: 0x1b8, 8;
    log_max_msg: 0x1c3, 5;
    cqe_version: 0x1fc, 4;
    cmdif_checksum: 0x210, 2; eth_net_offloads: 0x21c, 1; roce: 0x21d, 1; atomic: 0x21e, 1;
    xrc: 0x23c, 1; ud: 0x23d, 1; uc: 0x23e, 1; rc: 0x23f, 1;
    uar_4k: 0x240, 1; log_pg_sz: 0x258, 8;
    bf: 0x260, 1; driver_version: 0x261, 1; log_bf_reg_size: 0x26b, 5;
    max_wqe_sz_sq: 0x290, 16; max_wqe_sz_rq: 0x2b0, 16;
    log_max_transport_domain: 0x323, 5; log_max_pd: 0x32b, 5;
    log_max_rq: 0x363, 5; log_max_sq: 0x36b, 5; log_max_tir: 0x373, 5; log_max_tis: 0x37b, 5;
    log_max_wq_sz: 0x3db, 5;
    sq_ts_format: 0x440, 2; rq_ts_format: 0x442, 2;
    log_uar_page_sz: 0x490, 16;
    device_frequency_mhz: 0x4c0, 32;
    num_of_uars_per_page: 0x520, 32;
});

layout!(
    /// RoCE capabilities [mlx5_ifc.h roce_cap].
    roce_cap, 0x1000, {
    roce_apm: 0, 1; sw_r_roce_src_udp_port: 4, 1; qp_ts_format: 0x1e, 2;
    l3_type: 0x8c, 4; roce_version: 0x98, 8;
    r_roce_dest_udp_port: 0xb0, 16;
    r_roce_max_src_udp_port: 0xc0, 16; r_roce_min_src_udp_port: 0xd0, 16;
    roce_address_table_size: 0xf0, 16;
});

layout!(
    /// Event queue context [mlx5_ifc.h eqc].
    eqc, 0x40, {
    status: 0, 4; ec: 0xd, 1; oi: 0xe, 1; st: 0x14, 4;
    page_offset: 0x54, 6; log_eq_size: 0x63, 5; uar_page: 0x68, 24;
    intr: 0xb8, 8; log_page_size: 0xc3, 5;
    consumer_counter: 0x148, 24; producer_counter: 0x168, 24;
});
layout!(create_eq_in, 0x110, { eq_context_entry: 0x80, 0x40 * 8; event_bitmask_0: 0x2c0, 64; pas: 0x880, 64; });

layout!(
    /// Completion queue context [mlx5_ifc.h cqc].
    cqc, 0x40, {
    status: 0, 4; cqe_sz: 8, 3; cc: 0xb, 1; oi: 0xe, 1; cq_period_mode: 0xf, 2; cqe_comp_en: 0x11, 1;
    st: 0x14, 4; page_offset: 0x54, 6;
    log_cq_size: 0x63, 5; uar_page: 0x68, 24;
    cq_period: 0x84, 12; cq_max_count: 0x90, 16; c_eqn: 0xb8, 8; log_page_size: 0xc3, 5;
    last_notified_index: 0x108, 24; last_solicit_index: 0x128, 24;
    consumer_counter: 0x148, 24; producer_counter: 0x168, 24;
    dbr_addr: 0x1c0, 64;
});
layout!(create_cq_in, 0x110, { cq_context: 0x80, 0x40 * 8; pas: 0x880, 64; });
layout!(query_cq_out, 0x110, { cq_context: 0x80, 0x40 * 8; });

layout!(
    /// Memory key context [mlx5_ifc.h mkc].
    mkc, 0x40, {
    free: 1, 1; access_mode_4_2: 3, 3; umr_en: 0x10, 1; a: 0x11, 1; rw: 0x12, 1; rr: 0x13, 1;
    lw: 0x14, 1; lr: 0x15, 1; access_mode_1_0: 0x16, 2;
    qpn: 0x20, 24; mkey_7_0: 0x38, 8;
    length64: 0x60, 1; en_rinval: 0x67, 1; pd: 0x68, 24;
    start_addr: 0x80, 64; len: 0xc0, 64; bsf_octword_size: 0x100, 32;
    translations_octword_size: 0x1a0, 32; log_page_size: 0x1db, 5;
});
layout!(create_mkey_in, 0x110, {
    pg_access: 0x60, 1; memory_key_mkey_entry: 0x80, 0x40 * 8;
    translations_octword_actual_size: 0x300, 32; klm_pas_mtt: 0x880, 64;
});

layout!(
    /// Address path [mlx5_ifc.h ads].
    ads, 0x2c, {
    fl: 0, 1; free_ar: 1, 1; pkey_index: 0x10, 16;
    grh: 0x28, 1; mlid: 0x29, 7; rlid: 0x30, 16;
    ack_timeout: 0x40, 5; src_addr_index: 0x48, 8; stat_rate: 0x54, 4; hop_limit: 0x58, 8;
    tclass: 0x64, 8; flow_label: 0x6c, 20; rgid_rip: 0x80, 128;
    f_dscp: 0x104, 1; f_ecn: 0x105, 1; f_eth_prio: 0x107, 1; ecn: 0x108, 2; dscp: 0x10a, 6;
    udp_sport: 0x110, 16;
    dei_cfi: 0x120, 1; eth_prio: 0x121, 3; sl: 0x124, 4; vhca_port_num: 0x128, 8;
    rmac_47_32: 0x130, 16; rmac_31_0: 0x140, 32;
});

layout!(
    /// Queue pair context [mlx5_ifc.h qpc].
    qpc, 0xe8, {
    state: 0, 4; st: 8, 8; pm_state: 0x13, 2; pd: 0x28, 24;
    mtu: 0x40, 3; log_msg_max: 0x43, 5; log_rq_size: 0x49, 4; log_rq_stride: 0x4d, 3;
    no_sq: 0x50, 1; log_sq_size: 0x51, 4; ts_format: 0x58, 2; rlky: 0x5b, 1;
    counter_set_id: 0x60, 8; uar_page: 0x68, 24; user_index: 0x88, 24;
    log_page_size: 0xa3, 5; remote_qpn: 0xa8, 24;
    primary_address_path: 0xc0, 0x2c * 8; secondary_address_path: 0x220, 0x2c * 8;
    log_ack_req_freq: 0x380, 4; log_sra_max: 0x388, 3; retry_count: 0x38d, 3; rnr_retry: 0x390, 3;
    fre: 0x394, 1; cur_rnr_retry: 0x395, 3; cur_retry_count: 0x398, 3;
    next_send_psn: 0x3c8, 24; cqn_snd: 0x3e8, 24; deth_sqpn: 0x408, 24;
    last_acked_psn: 0x448, 24; ssn: 0x468, 24;
    log_rra_max: 0x488, 3; atomic_mode: 0x48c, 4; rre: 0x490, 1; rwe: 0x491, 1; rae: 0x492, 1;
    page_offset: 0x494, 6;
    min_rnr_nak: 0x4a3, 5; next_rcv_psn: 0x4a8, 24; xrcd: 0x4c8, 24; cqn_rcv: 0x4e8, 24;
    dbr_addr: 0x500, 64; q_key: 0x540, 32; rq_type: 0x565, 3; srqn_rmpn_xrqn: 0x568, 24;
    rmsn: 0x588, 24; hw_sq_wqebb_counter: 0x5a0, 16; sw_sq_wqebb_counter: 0x5b0, 16;
    hw_rq_counter: 0x5c0, 32; sw_rq_counter: 0x5e0, 32;
});
// CREATE_QP, the modify commands and QUERY_QP output share this frame.
layout!(qp_cmd, 0x110, { qpn: 0x48, 24; opt_param_mask: 0x80, 32; qpc: 0xc0, 0xe8 * 8; pas: 0x880, 64; });

layout!(
    /// NIC vport context [mlx5_ifc.h nic_vport_context] (the part before the address lists).
    nic_vport_context, 0x100, {
    min_wqe_inline_mode: 5, 3; disable_mc_local_lb: 0x1d, 1; disable_uc_local_lb: 0x1e, 1; roce_en: 0x1f, 1;
    mtu: 0x130, 16;
    promisc_uc: 0x780, 1; promisc_mc: 0x781, 1; promisc_all: 0x782, 1;
    permanent_address_47_32: 0x7b0, 16; permanent_address_31_0: 0x7c0, 32;
});
layout!(query_nic_vport_context_in, 16, { other_vport: 0x40, 1; vport_number: 0x50, 16; });
layout!(query_nic_vport_context_out, 0x110, { nic_vport_context: 0x80, 0x100 * 8; });
layout!(modify_nic_vport_context_in, 0x200, {
    other_vport: 0x40, 1; vport_number: 0x50, 16;
    field_select_roce_en: 0x7e, 1; field_select_permanent_address: 0x7c, 1;
    field_select_promisc: 0x7b, 1; field_select_mtu: 0x79, 1;
    field_select_disable_uc_local_lb: 0x74, 1; field_select_disable_mc_local_lb: 0x75, 1;
    nic_vport_context: 0x800, 0x100 * 8;
});
layout!(query_vport_state_in, 16, { other_vport: 0x40, 1; vport_number: 0x50, 16; });
layout!(query_vport_state_out, 16, { admin_state: 0x78, 4; state: 0x7c, 4; });

layout!(
    /// One GID table entry [mlx5_ifc.h roce_addr_layout].
    roce_addr_layout, 0x20, {
    source_l3_address: 0, 128; vlan_valid: 0x83, 1; vlan_id: 0x84, 12; source_mac_47_32: 0x90, 16;
    source_mac_31_0: 0xa0, 32; roce_l3_type: 0xd4, 4; roce_version: 0xd8, 8;
});
layout!(set_roce_address_in, 0x30, { roce_address_index: 0x40, 16; vhca_port_num: 0x5c, 4; roce_address: 0x80, 0x20 * 8; });
layout!(query_roce_address_in, 16, { roce_address_index: 0x40, 16; vhca_port_num: 0x5c, 4; });
layout!(query_roce_address_out, 0x30, { roce_address: 0x80, 0x20 * 8; });


/// Every declared layout, by structure (for tools and tests).
pub const ALL_LAYOUTS: &[&[Field]] = &[
    init_seg::ALL,
    cmd_layout::ALL,
    cmd_mailbox::ALL,
    cmd_in::ALL,
    cmd_out::ALL,
    enable_hca_in::ALL,
    query_issi_out::ALL,
    set_issi_in::ALL,
    query_pages_out::ALL,
    manage_pages_in::ALL,
    manage_pages_out::ALL,
    query_hca_cap_in::ALL,
    query_hca_cap_out::ALL,
    set_hca_cap_in::ALL,
    teardown_hca_in::ALL,
    teardown_hca_out::ALL,
    access_register_in::ALL,
    host_endianness_reg::ALL,
    pmtu_reg::ALL,
    obj_id_24::ALL,
    create_eq_out::ALL,
    destroy_eq_in::ALL,
    query_special_contexts_out::ALL,
    cmd_hca_cap::ALL,
    roce_cap::ALL,
    eqc::ALL,
    create_eq_in::ALL,
    cqc::ALL,
    create_cq_in::ALL,
    query_cq_out::ALL,
    mkc::ALL,
    create_mkey_in::ALL,
    ads::ALL,
    qpc::ALL,
    qp_cmd::ALL,
    nic_vport_context::ALL,
    query_nic_vport_context_in::ALL,
    query_nic_vport_context_out::ALL,
    modify_nic_vport_context_in::ALL,
    query_vport_state_in::ALL,
    query_vport_state_out::ALL,
    roce_addr_layout::ALL,
    set_roce_address_in::ALL,
    query_roce_address_in::ALL,
    query_roce_address_out::ALL,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_set_roundtrip() {
        let mut b = [0u8; 0x40];
        set(&mut b, cqc::log_cq_size, 10);
        set(&mut b, cqc::uar_page, 0xabcdef);
        set(&mut b, cqc::dbr_addr, 0x1_2345_6780);
        assert_eq!(b[0x0c], 0x0a);
        assert_eq!(&b[0x0d..0x10], &[0xab, 0xcd, 0xef]);
        assert_eq!(get(&b, cqc::log_cq_size), 10);
        assert_eq!(get(&b, cqc::uar_page), 0xabcdef);
        assert_eq!(get(&b, cqc::dbr_addr), 0x1_2345_6780);
        assert_eq!(get(&b[..4], cqc::dbr_addr), 0, "past the end reads 0");
    }

    /// A few offsets held against the byte/bit positions the reference notes give
    /// (shared/reference/mlx5.md, computed there from the _bits structs).
    #[test]
    fn known_positions() {
        let byte_bits = |f: Field| (f.bit / 32 * 4, 31 - (f.bit % 32));
        assert_eq!(byte_bits(qpc::rlky), (0x08, 4));
        assert_eq!(byte_bits(qpc::rre), (0x90, 15));
        assert_eq!(qpc::dbr_addr.byte(), 0xa0);
        assert_eq!(qpc::q_key.byte(), 0xa8);
        assert_eq!(byte_bits(qpc::min_rnr_nak), (0x94, 28));
        assert_eq!(ads::udp_sport.byte(), 0x22);
        assert_eq!(byte_bits(ads::ack_timeout), (0x08, 31));
        assert_eq!(byte_bits(cmd_hca_cap::roce), (0x40, 2));
        assert_eq!(byte_bits(cmd_hca_cap::port_type), (0x34, 9));
        assert_eq!(byte_bits(cmd_hca_cap::log_uar_page_sz), (0x90, 15));
        assert_eq!(byte_bits(roce_cap::r_roce_dest_udp_port), (0x14, 15));
        assert_eq!(roce_cap::roce_address_table_size.byte(), 0x1e);
        assert_eq!(mkc::translations_octword_size.byte(), 0x34);
        assert_eq!(byte_bits(mkc::log_page_size), (0x38, 4));
        assert_eq!(nic_vport_context::permanent_address_47_32.byte(), 0xf6);
        assert_eq!(query_issi_out::supported_issi_dw0.byte(), 0x6c);
        assert_eq!(create_eq_in::event_bitmask_0.byte(), 0x58);
        assert_eq!(byte_bits(cmd_layout::ownership), (0x3c, 0));
        assert_eq!(init_seg::health_counter.byte(), 0x1011);
    }
}
