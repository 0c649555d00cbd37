//! Every hardware layout the driver touches, declared once as field tables with `mlx5_ifc.h` names.
//!
//! Sources (facts only): Linux `include/linux/mlx5/mlx5_ifc.h` (as carried in
//! gpudirect/mlnx-ofa_kernel @2ce4cd07) and rdma-core `providers/mlx5/mlx5_ifc.h` @691953d8 for the
//! `_bits` command structs; Linux `device.h` / rdma-core `mlx5_vfio.h` for the init segment,
//! command entry, mailbox block and EQE; Linux `qp.h` / rdma-core `mlx5dv.h` for CQE and WQE
//! segments. Offsets are written in the PRM's dword notation `F(byte, hi, lo)` (bits hi..lo of
//! the big-endian dword at `byte`), `B(byte, len)` for byte-aligned blobs, `S(byte, layout)` for
//! nested structs. `tests/layout_offsets.rs` holds them against numbers taken from the header.

use crate::layout::{Entry, Field, Layout};

const fn strip_raw(s: &'static str) -> &'static str {
    let b = s.as_bytes();
    if b.len() > 2 && b[0] == b'r' && b[1] == b'#' {
        s.split_at(2).1
    } else {
        s
    }
}

macro_rules! layouts {
    ($( $s:ident [$size:expr] { $($f:ident = $e:expr),* $(,)? } )*) => {
        $(
            #[allow(non_upper_case_globals, dead_code, unused_imports)]
            pub mod $s {
                use super::*;
                use crate::layout::{B, F, S};
                $( pub const $f: Field = { const E: Entry = $e; E.field }; )*
                /// Size of the struct in bytes.
                pub const SIZE: usize = $size;
                /// This struct's table.
                pub const LAYOUT: Layout = Layout {
                    name: stringify!($s),
                    size: $size,
                    entries: &[ $( (strip_raw(stringify!($f)), $e) ),* ],
                };
                const _: () = {
                    let mut i = 0;
                    while i < LAYOUT.entries.len() {
                        let f = LAYOUT.entries[i].1.field;
                        // flexible arrays (pas[], register_data[]) start exactly at the end
                        assert!((f.off + f.width) as usize <= $size * 8 || f.off as usize == $size * 8, "field outside its struct");
                        i += 1;
                    }
                };
            }
        )*
        /// Every table, for printing and lookup.
        pub static ALL: &[&Layout] = &[ $( &$s::LAYOUT ),* ];
    };
}

layouts! {
    // ---- device.h / mlx5_vfio.h: initialization segment (BAR0 offset 0) ----
    health_buffer [0x40] {
        assert_var = B(0x00, 0x14),
        assert_exit_ptr = F(0x20, 31, 0),
        assert_callra = F(0x24, 31, 0),
        fw_ver = F(0x30, 31, 0),
        hw_id = F(0x34, 31, 0),
        rfr = F(0x38, 31, 0),
        irisc_index = F(0x3c, 31, 24),
        synd = F(0x3c, 23, 16),
        ext_synd = F(0x3c, 15, 0),
    }
    init_seg [0x2010] {
        fw_rev_minor = F(0x00, 31, 16),
        fw_rev_major = F(0x00, 15, 0),
        cmdif_rev = F(0x04, 31, 16),
        fw_rev_subminor = F(0x04, 15, 0),
        cmdq_addr_h = F(0x10, 31, 0),
        cmdq_addr_l = F(0x14, 31, 12),
        nic_interface = F(0x14, 10, 8),
        log_cmdq_size = F(0x14, 7, 4),
        log_cmdq_stride = F(0x14, 3, 0),
        cmd_dbell = F(0x18, 31, 0),
        initializing = F(0x1fc, 31, 31),
        health = S(0x200, &health_buffer::LAYOUT),
        internal_timer_h = F(0x1000, 31, 0),
        internal_timer_l = F(0x1004, 31, 0),
        health_counter = F(0x1010, 23, 0),
    }
    // ---- command queue entry and mailbox block (device.h mlx5_cmd_layout / mlx5_cmd_prot_block) ----
    cmd_layout [0x40] {
        r#type = F(0x00, 31, 24),
        ilen = F(0x04, 31, 0),
        iptr = B(0x08, 8),
        r#in = B(0x10, 0x10),
        out = B(0x20, 0x10),
        optr = B(0x30, 8),
        olen = F(0x38, 31, 0),
        token = F(0x3c, 31, 24),
        sig = F(0x3c, 23, 16),
        status = F(0x3c, 7, 1),
        ownership = F(0x3c, 0, 0),
    }
    cmd_prot_block [0x240] {
        data = B(0x000, 0x200),
        next = B(0x230, 8),
        block_num = F(0x238, 31, 0),
        token = F(0x23c, 23, 16),
        ctrl_sig = F(0x23c, 15, 8),
        sig = F(0x23c, 7, 0),
    }
    // generic command header (mlx5_ifc mbox_in / mbox_out)
    mbox_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
    }
    mbox_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    // ACCESS_REG register data (mlx5_ifc host_endianness_reg)
    host_endianness_reg [0x10] {
        he = F(0x00, 31, 31),
    }
    // ---- EQE (device.h mlx5_eqe and its event-data views) ----
    eqe_page_req [0x1c] {
        ec_function = F(0x00, 31, 31),
        function_id = F(0x00, 15, 0),
        num_pages = F(0x04, 31, 0),
    }
    eqe_cq_err [0x1c] {
        cqn = F(0x00, 23, 0),
        syndrome = F(0x08, 7, 0),
    }
    eqe_port_state [0x1c] {
        port = F(0x08, 31, 28),
    }
    eqe_qp_srq [0x1c] {
        r#type = F(0x14, 31, 24),
        qp_srq_n = F(0x18, 23, 0),
    }
    eqe_comp [0x1c] {
        cqn = F(0x18, 23, 0),
    }
    eqe [0x40] {
        r#type = F(0x00, 23, 16),
        sub_type = F(0x00, 7, 0),
        data = B(0x20, 0x1c),
        page_req = S(0x20, &eqe_page_req::LAYOUT),
        cq_err = S(0x20, &eqe_cq_err::LAYOUT),
        port_state = S(0x20, &eqe_port_state::LAYOUT),
        qp_srq = S(0x20, &eqe_qp_srq::LAYOUT),
        comp = S(0x20, &eqe_comp::LAYOUT),
        signature = F(0x3c, 15, 8),
        owner = F(0x3c, 7, 0),
    }
    // ---- CQE (mlx5dv.h mlx5_cqe64 / mlx5_err_cqe) ----
    cqe64 [0x40] {
        flags_rqpn = F(0x18, 31, 0),
        rqpn = F(0x18, 23, 0),
        srqn_uidx = F(0x20, 31, 0),
        imm_inval_pkey = F(0x24, 31, 0),
        byte_cnt = F(0x2c, 31, 0),
        timestamp = B(0x30, 8),
        vendor_err_synd = F(0x34, 15, 8),
        syndrome = F(0x34, 7, 0),
        sop_drop_qpn = F(0x38, 31, 0),
        s_wqe_opcode = F(0x38, 31, 24),
        qpn = F(0x38, 23, 0),
        wqe_counter = F(0x3c, 31, 16),
        signature = F(0x3c, 15, 8),
        op_own = F(0x3c, 7, 0),
        opcode = F(0x3c, 7, 4),
        owner = F(0x3c, 0, 0),
    }
    // ---- WQE segments (qp.h / mlx5dv.h) ----
    wqe_ctrl_seg [0x10] {
        opmod = F(0x00, 31, 24),
        wqe_index = F(0x00, 23, 8),
        opcode = F(0x00, 7, 0),
        qpn = F(0x04, 31, 8),
        ds = F(0x04, 5, 0),
        signature = F(0x08, 31, 24),
        fm_ce_se = F(0x08, 7, 0),
        imm = F(0x0c, 31, 0),
    }
    wqe_raddr_seg [0x10] {
        raddr = B(0x00, 8),
        rkey = F(0x08, 31, 0),
    }
    wqe_data_seg [0x10] {
        byte_count = F(0x00, 31, 0),
        lkey = F(0x04, 31, 0),
        addr = B(0x08, 8),
    }
    // mlx5_wqe_srq_next_seg (Linux qp.h, rdma-core mlx5dv.h): the first 16 bytes of every SRQ/RMP
    // receive WQE; the WQEs form a linked list through next_wqe_index.
    wqe_srq_next_seg [0x10] {
        next_wqe_index = F(0x00, 15, 0),
        signature = F(0x04, 31, 24),
    }
    // mlx5_wqe_umr_ctrl_seg (qp.h): the segment after ctrl in a UMR WQE; the mkey context
    // segment that follows it has the `mkc` layout (mlx5_mkey_seg).
    wqe_umr_ctrl_seg [0x30] {
        flags = F(0x00, 31, 24),
        xlt_octowords = F(0x04, 31, 16),
        xlt_offset = F(0x04, 15, 0),
        mkey_mask = B(0x08, 8),
        xlt_offset_47_16 = F(0x10, 31, 0),
    }
    wqe_inline_seg [0x04] {
        byte_count = F(0x00, 31, 0),
    }
    wqe_av [0x30] {
        qkey = F(0x00, 31, 0),
        dqp_dct = F(0x08, 31, 0),
        stat_rate_sl = F(0x0c, 31, 24),
        fl_mlid = F(0x0c, 23, 16),
        rlid = F(0x0c, 15, 0),
        rmac = B(0x14, 6),
        tclass = F(0x18, 15, 8),
        hop_limit = F(0x18, 7, 0),
        grh_gid_fl = F(0x1c, 31, 0),
        rgid = B(0x20, 0x10),
    }
    // ---- mlx5_ifc.h `_bits` structs ----
    modify_nic_vport_field_select [0x4] {
        affiliation = F(0x00, 13, 13),
        disable_uc_local_lb = F(0x00, 11, 11),
        disable_mc_local_lb = F(0x00, 10, 10),
        node_guid = F(0x00, 9, 9),
        port_guid = F(0x00, 8, 8),
        min_inline = F(0x00, 7, 7),
        mtu = F(0x00, 6, 6),
        change_event = F(0x00, 5, 5),
        promisc = F(0x00, 4, 4),
        permanent_address = F(0x00, 3, 3),
        addresses_list = F(0x00, 2, 2),
        roce_en = F(0x00, 1, 1),
    }
    mac_address_layout [0x8] {
        mac_addr_47_32 = F(0x00, 15, 0),
        mac_addr_31_0 = F(0x04, 31, 0),
    }
    ads [0x2c] {
        fl = F(0x00, 31, 31),
        free_ar = F(0x00, 30, 30),
        pkey_index = F(0x00, 15, 0),
        grh = F(0x04, 23, 23),
        mlid = F(0x04, 22, 16),
        rlid = F(0x04, 15, 0),
        ack_timeout = F(0x08, 31, 27),
        src_addr_index = F(0x08, 23, 16),
        stat_rate = F(0x08, 11, 8),
        hop_limit = F(0x08, 7, 0),
        tclass = F(0x0c, 27, 20),
        flow_label = F(0x0c, 19, 0),
        rgid_rip = B(0x10, 0x10),
        f_dscp = F(0x20, 27, 27),
        f_ecn = F(0x20, 26, 26),
        f_eth_prio = F(0x20, 24, 24),
        ecn = F(0x20, 23, 22),
        dscp = F(0x20, 21, 16),
        udp_sport = F(0x20, 15, 0),
        dei_cfi = F(0x24, 31, 31),
        eth_prio = F(0x24, 30, 28),
        sl = F(0x24, 27, 24),
        vhca_port_num = F(0x24, 23, 16),
        rmac_47_32 = F(0x24, 15, 0),
        rmac_31_0 = F(0x28, 31, 0),
    }
    qpc [0xe8] {
        state = F(0x00, 31, 28),
        lag_tx_port_affinity = F(0x00, 27, 24),
        st = F(0x00, 23, 16),
        isolate_vl_tc = F(0x00, 13, 13),
        pm_state = F(0x00, 12, 11),
        req_e2e_credit_mode = F(0x00, 9, 8),
        offload_type = F(0x00, 7, 4),
        end_padding_mode = F(0x00, 3, 2),
        wq_signature = F(0x04, 31, 31),
        block_lb_mc = F(0x04, 30, 30),
        atomic_like_write_en = F(0x04, 29, 29),
        latency_sensitive = F(0x04, 28, 28),
        drain_sigerr = F(0x04, 26, 26),
        pd = F(0x04, 23, 0),
        mtu = F(0x08, 31, 29),
        log_msg_max = F(0x08, 28, 24),
        log_rq_size = F(0x08, 22, 19),
        log_rq_stride = F(0x08, 18, 16),
        no_sq = F(0x08, 15, 15),
        log_sq_size = F(0x08, 14, 11),
        ts_format = F(0x08, 7, 6),
        data_in_order = F(0x08, 5, 5),
        rlky = F(0x08, 4, 4),
        ulp_stateless_offload_mode = F(0x08, 3, 0),
        counter_set_id = F(0x0c, 31, 24),
        uar_page = F(0x0c, 23, 0),
        user_index = F(0x10, 23, 0),
        log_page_size = F(0x14, 28, 24),
        remote_qpn = F(0x14, 23, 0),
        primary_address_path = S(0x18, &ads::LAYOUT),
        secondary_address_path = S(0x44, &ads::LAYOUT),
        log_ack_req_freq = F(0x70, 31, 28),
        log_sra_max = F(0x70, 23, 21),
        retry_count = F(0x70, 18, 16),
        rnr_retry = F(0x70, 15, 13),
        fre = F(0x70, 11, 11),
        cur_rnr_retry = F(0x70, 10, 8),
        cur_retry_count = F(0x70, 7, 5),
        next_send_psn = F(0x78, 23, 0),
        cqn_snd = F(0x7c, 23, 0),
        deth_sqpn = F(0x80, 23, 0),
        last_acked_psn = F(0x88, 23, 0),
        ssn = F(0x8c, 23, 0),
        log_rra_max = F(0x90, 23, 21),
        atomic_mode = F(0x90, 19, 16),
        rre = F(0x90, 15, 15),
        rwe = F(0x90, 14, 14),
        rae = F(0x90, 13, 13),
        page_offset = F(0x90, 11, 6),
        cd_slave_receive = F(0x90, 2, 2),
        cd_slave_send = F(0x90, 1, 1),
        cd_master = F(0x90, 0, 0),
        min_rnr_nak = F(0x94, 28, 24),
        next_rcv_psn = F(0x94, 23, 0),
        xrcd = F(0x98, 23, 0),
        cqn_rcv = F(0x9c, 23, 0),
        dbr_addr = B(0xa0, 0x8),
        q_key = F(0xa8, 31, 0),
        rq_type = F(0xac, 26, 24),
        srqn_rmpn_xrqn = F(0xac, 23, 0),
        rmsn = F(0xb0, 23, 0),
        hw_sq_wqebb_counter = F(0xb4, 31, 16),
        sw_sq_wqebb_counter = F(0xb4, 15, 0),
        hw_rq_counter = F(0xb8, 31, 0),
        sw_rq_counter = F(0xbc, 31, 0),
        cgs = F(0xc4, 16, 16),
        cs_req = F(0xc4, 15, 8),
        cs_res = F(0xc4, 7, 0),
        dc_access_key = B(0xc8, 0x8),
        dbr_umem_valid = F(0xd0, 28, 28),
        dbr_umem_id = F(0xe4, 31, 0),
    }
    cqc [0x40] {
        status = F(0x00, 31, 28),
        cqe_sz = F(0x00, 23, 21),
        cc = F(0x00, 20, 20),
        scqe_break_moderation_en = F(0x00, 18, 18),
        oi = F(0x00, 17, 17),
        cq_period_mode = F(0x00, 16, 15),
        cqe_comp_en = F(0x00, 14, 14),
        mini_cqe_res_format = F(0x00, 13, 12),
        st = F(0x00, 11, 8),
        page_offset = F(0x08, 11, 6),
        log_cq_size = F(0x0c, 28, 24),
        uar_page = F(0x0c, 23, 0),
        cq_period = F(0x10, 27, 16),
        cq_max_count = F(0x10, 15, 0),
        c_eqn = F(0x14, 7, 0),
        log_page_size = F(0x18, 28, 24),
        last_notified_index = F(0x20, 23, 0),
        last_solicit_index = F(0x24, 23, 0),
        consumer_counter = F(0x28, 23, 0),
        producer_counter = F(0x2c, 23, 0),
        dbr_addr = B(0x38, 0x8),
    }
    eqc [0x40] {
        status = F(0x00, 31, 28),
        ec = F(0x00, 18, 18),
        oi = F(0x00, 17, 17),
        st = F(0x00, 11, 8),
        page_offset = F(0x08, 11, 6),
        log_eq_size = F(0x0c, 28, 24),
        uar_page = F(0x0c, 23, 0),
        intr = F(0x14, 7, 0),
        log_page_size = F(0x18, 28, 24),
        consumer_counter = F(0x28, 23, 0),
        producer_counter = F(0x2c, 23, 0),
    }
    mkc [0x40] {
        free = F(0x00, 30, 30),
        access_mode_4_2 = F(0x00, 28, 26),
        relaxed_ordering_write = F(0x00, 18, 18),
        small_fence_on_rdma_read_response = F(0x00, 16, 16),
        umr_en = F(0x00, 15, 15),
        a = F(0x00, 14, 14),
        rw = F(0x00, 13, 13),
        rr = F(0x00, 12, 12),
        lw = F(0x00, 11, 11),
        lr = F(0x00, 10, 10),
        access_mode_1_0 = F(0x00, 9, 8),
        qpn = F(0x04, 31, 8),
        mkey_7_0 = F(0x04, 7, 0),
        length64 = F(0x0c, 31, 31),
        bsf_en = F(0x0c, 30, 30),
        sync_umr = F(0x0c, 29, 29),
        expected_sigerr_count = F(0x0c, 26, 26),
        en_rinval = F(0x0c, 24, 24),
        pd = F(0x0c, 23, 0),
        start_addr = B(0x10, 0x8),
        len = B(0x18, 0x8),
        bsf_octword_size = F(0x20, 31, 0),
        translations_octword_size = F(0x34, 31, 0),
        relaxed_ordering_read = F(0x38, 6, 6),
        log_page_size = F(0x38, 4, 0),
        crypto_en = F(0x3c, 28, 27),
    }
    roce_addr_layout [0x20] {
        source_l3_address = B(0x0, 0x10),
        vlan_valid = F(0x10, 28, 28),
        vlan_id = F(0x10, 27, 16),
        source_mac_47_32 = F(0x10, 15, 0),
        source_mac_31_0 = F(0x14, 31, 0),
        roce_l3_type = F(0x18, 11, 8),
        roce_version = F(0x18, 7, 0),
    }
    nic_vport_context [0x100] {
        min_wqe_inline_mode = F(0x00, 26, 24),
        disable_mc_local_lb = F(0x00, 2, 2),
        disable_uc_local_lb = F(0x00, 1, 1),
        roce_en = F(0x00, 0, 0),
        arm_change_event = F(0x04, 31, 31),
        event_on_mtu = F(0x04, 4, 4),
        event_on_promisc_change = F(0x04, 3, 3),
        event_on_vlan_change = F(0x04, 2, 2),
        event_on_mc_address_change = F(0x04, 1, 1),
        event_on_uc_address_change = F(0x04, 0, 0),
        mtu = F(0x24, 15, 0),
        system_image_guid = B(0x28, 0x8),
        port_guid = B(0x30, 0x8),
        node_guid = B(0x38, 0x8),
        qkey_violation_counter = F(0x68, 31, 16),
        promisc_uc = F(0xf0, 31, 31),
        promisc_mc = F(0xf0, 30, 30),
        promisc_all = F(0xf0, 29, 29),
        allowed_list_type = F(0xf0, 26, 24),
        allowed_list_size = F(0xf0, 11, 0),
        permanent_address = S(0xf4, &mac_address_layout::LAYOUT),
    }
    cmd_hca_cap [0x100] {
        vhca_resource_manager = F(0x00, 0, 0),
        log_max_srq_sz = F(0x10, 31, 24),
        log_max_qp_sz = F(0x10, 23, 16),
        log_max_qp = F(0x10, 4, 0),
        log_max_srq = F(0x14, 20, 16),
        log_max_cq_sz = F(0x18, 23, 16),
        log_max_cq = F(0x18, 4, 0),
        log_max_eq_sz = F(0x1c, 31, 24),
        log_max_mkey = F(0x1c, 21, 16),
        log_max_eq = F(0x1c, 3, 0),
        max_indirection = F(0x20, 31, 24),
        log_max_mrw_sz = F(0x20, 22, 16),
        force_teardown = F(0x20, 15, 15),
        fast_teardown = F(0x20, 14, 14),
        umr_extended_translation_offset = F(0x20, 7, 7),
        null_mkey = F(0x20, 6, 6),
        log_max_klm_list_size = F(0x20, 5, 0),
        log_max_ra_req_dc = F(0x24, 21, 16),
        log_max_ra_res_dc = F(0x24, 5, 0),
        log_max_ra_req_qp = F(0x28, 21, 16),
        log_max_ra_res_qp = F(0x28, 5, 0),
        end_pad = F(0x2c, 31, 31),
        cc_query_allowed = F(0x2c, 30, 30),
        cc_modify_allowed = F(0x2c, 29, 29),
        start_pad = F(0x2c, 28, 28),
        cache_line_128byte = F(0x2c, 27, 27),
        gid_table_size = F(0x2c, 15, 0),
        out_of_seq_cnt = F(0x30, 31, 31),
        vport_counters = F(0x30, 30, 30),
        retransmission_q_counters = F(0x30, 29, 29),
        max_qp_cnt = F(0x30, 25, 16),
        pkey_table_size = F(0x30, 15, 0),
        vport_group_manager = F(0x34, 31, 31),
        vhca_group_manager = F(0x34, 30, 30),
        ib_virt = F(0x34, 29, 29),
        eth_virt = F(0x34, 28, 28),
        vnic_env_queue_counters = F(0x34, 27, 27),
        ets = F(0x34, 26, 26),
        nic_flow_table = F(0x34, 25, 25),
        eswitch_manager = F(0x34, 24, 24),
        device_memory = F(0x34, 23, 23),
        mcam_reg = F(0x34, 22, 22),
        pcam_reg = F(0x34, 21, 21),
        local_ca_ack_delay = F(0x34, 20, 16),
        port_module_event = F(0x34, 15, 15),
        port_type = F(0x34, 9, 8),
        num_ports = F(0x34, 7, 0),
        log_max_msg = F(0x38, 28, 24),
        max_tc = F(0x38, 19, 16),
        temp_warn_event = F(0x38, 15, 15),
        dcbx = F(0x38, 14, 14),
        general_notification_event = F(0x38, 13, 13),
        rol_s = F(0x38, 9, 9),
        rol_g = F(0x38, 8, 8),
        wol_s = F(0x38, 6, 6),
        wol_g = F(0x38, 5, 5),
        wol_a = F(0x38, 4, 4),
        wol_b = F(0x38, 3, 3),
        wol_m = F(0x38, 2, 2),
        wol_u = F(0x38, 1, 1),
        wol_p = F(0x38, 0, 0),
        stat_rate_support = F(0x3c, 31, 16),
        cqe_version = F(0x3c, 3, 0),
        compact_address_vector = F(0x40, 31, 31),
        ipoib_enhanced_offloads = F(0x40, 28, 28),
        ipoib_basic_offloads = F(0x40, 27, 27),
        cmdif_checksum = F(0x40, 15, 14),
        sigerr_cqe = F(0x40, 13, 13),
        wq_signature = F(0x40, 11, 11),
        sctr_data_cqe = F(0x40, 10, 10),
        sho = F(0x40, 8, 8),
        tph = F(0x40, 7, 7),
        rf = F(0x40, 6, 6),
        dct = F(0x40, 5, 5),
        qos = F(0x40, 4, 4),
        eth_net_offloads = F(0x40, 3, 3),
        roce = F(0x40, 2, 2),
        atomic = F(0x40, 1, 1),
        cq_oi = F(0x44, 31, 31),
        cq_resize = F(0x44, 30, 30),
        cq_moderation = F(0x44, 29, 29),
        cq_eq_remap = F(0x44, 25, 25),
        pg = F(0x44, 24, 24),
        block_lb_mc = F(0x44, 23, 23),
        scqe_break_moderation = F(0x44, 21, 21),
        cq_period_start_from_cqe = F(0x44, 20, 20),
        cd = F(0x44, 19, 19),
        apm = F(0x44, 17, 17),
        vector_calc = F(0x44, 16, 16),
        imaicl = F(0x44, 14, 14),
        qkv = F(0x44, 9, 9),
        pkv = F(0x44, 8, 8),
        set_deth_sqpn = F(0x44, 7, 7),
        xrc = F(0x44, 3, 3),
        ud = F(0x44, 2, 2),
        uc = F(0x44, 1, 1),
        rc = F(0x44, 0, 0),
        uar_4k = F(0x48, 31, 31),
        uar_sz = F(0x48, 21, 16),
        log_pg_sz = F(0x48, 7, 0),
        bf = F(0x4c, 31, 31),
        driver_version = F(0x4c, 30, 30),
        pad_tx_eth_packet = F(0x4c, 29, 29),
        log_bf_reg_size = F(0x4c, 20, 16),
        lag_master = F(0x4c, 4, 4),
        num_lag_ports = F(0x4c, 3, 0),
        max_wqe_sz_sq = F(0x50, 15, 0),
        max_wqe_sz_rq = F(0x54, 15, 0),
        max_wqe_sz_sq_dc = F(0x58, 15, 0),
        max_qp_mcg = F(0x5c, 24, 0),
        log_max_mcg = F(0x60, 7, 0),
        log_max_transport_domain = F(0x64, 28, 24),
        log_max_pd = F(0x64, 20, 16),
        log_max_xrcd = F(0x64, 4, 0),
        log_max_flow_counter_bulk = F(0x68, 23, 16),
        log_max_rq = F(0x6c, 28, 24),
        log_max_sq = F(0x6c, 20, 16),
        log_max_tir = F(0x6c, 12, 8),
        log_max_tis = F(0x6c, 4, 0),
        basic_cyclic_rcv_wqe = F(0x70, 31, 31),
        log_max_rmp = F(0x70, 28, 24),
        log_max_rqt = F(0x70, 20, 16),
        log_max_rqt_size = F(0x70, 12, 8),
        log_max_tis_per_sq = F(0x70, 4, 0),
        log_max_stride_sz_rq = F(0x74, 28, 24),
        log_min_stride_sz_rq = F(0x74, 20, 16),
        log_max_stride_sz_sq = F(0x74, 12, 8),
        log_min_stride_sz_sq = F(0x74, 4, 0),
        log_max_wq_sz = F(0x78, 4, 0),
        log_max_vlan_list = F(0x7c, 20, 16),
        log_max_current_mc_list = F(0x7c, 12, 8),
        log_max_current_uc_list = F(0x7c, 4, 0),
        sq_ts_format = F(0x88, 31, 30),
        rq_ts_format = F(0x88, 29, 28),
        log_max_l2_table = F(0x90, 28, 24),
        log_uar_page_sz = F(0x90, 15, 0),
        device_frequency_mhz = F(0x98, 31, 0),
        device_frequency_khz = F(0x9c, 31, 0),
        log_max_pasid = F(0xa0, 4, 0),
        num_of_uars_per_page = F(0xa4, 31, 0),
    }
    roce_cap [0x100] {
        roce_apm = F(0x00, 31, 31),
        sw_r_roce_src_udp_port = F(0x00, 27, 27),
        fl_rc_qp_when_roce_disabled = F(0x00, 26, 26),
        fl_rc_qp_when_roce_enabled = F(0x00, 25, 25),
        qp_ts_format = F(0x00, 1, 0),
        l3_type = F(0x10, 19, 16),
        roce_version = F(0x10, 7, 0),
        r_roce_dest_udp_port = F(0x14, 15, 0),
        r_roce_max_src_udp_port = F(0x18, 31, 16),
        r_roce_min_src_udp_port = F(0x18, 15, 0),
        roce_address_table_size = F(0x1c, 15, 0),
    }
    enable_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        function_id = F(0x08, 15, 0),
    }
    enable_hca_out [0xc] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    disable_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        function_id = F(0x08, 15, 0),
    }
    disable_hca_out [0xc] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_issi_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    query_issi_out [0x70] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        current_issi = F(0x08, 15, 0),
        supported_issi_dw0 = F(0x6c, 31, 0),
    }
    set_issi_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        current_issi = F(0x08, 15, 0),
    }
    set_issi_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_pages_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        function_id = F(0x08, 15, 0),
    }
    query_pages_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        embedded_cpu_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
        num_pages = F(0x0c, 31, 0),
    }
    manage_pages_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        embedded_cpu_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
        input_num_entries = F(0x0c, 31, 0),
        pas = B(0x10, 0x8),
    }
    manage_pages_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        output_num_entries = F(0x08, 31, 0),
        pas = B(0x10, 0x8),
    }
    query_hca_cap_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
    }
    query_hca_cap_out [0x1010] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        capability = B(0x10, 0x1000),
    }
    set_hca_cap_in [0x1010] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
        capability = B(0x10, 0x1000),
    }
    set_hca_cap_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    init_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    init_hca_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    teardown_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        profile = F(0x08, 15, 0),
    }
    teardown_hca_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        state = F(0x0c, 0, 0),
    }
    access_register_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        register_id = F(0x08, 15, 0),
        argument = F(0x0c, 31, 0),
        register_data = F(0x10, 31, 0),
    }
    access_register_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        register_data = F(0x10, 31, 0),
    }
    pmtu_reg [0x10] {
        local_port = F(0x00, 23, 16),
        max_mtu = F(0x04, 31, 16),
        admin_mtu = F(0x08, 31, 16),
        oper_mtu = F(0x0c, 31, 16),
    }
    alloc_uar_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    alloc_uar_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        uar = F(0x08, 23, 0),
    }
    dealloc_uar_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        uar = F(0x08, 23, 0),
    }
    dealloc_uar_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    create_eq_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        eq_context_entry = S(0x10, &eqc::LAYOUT),
        event_bitmask = B(0x58, 0x20),
        pas = B(0x110, 0x8),
    }
    create_eq_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        eq_number = F(0x08, 7, 0),
    }
    destroy_eq_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        eq_number = F(0x08, 7, 0),
    }
    destroy_eq_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    alloc_pd_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
    }
    alloc_pd_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        pd = F(0x08, 23, 0),
    }
    dealloc_pd_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        pd = F(0x08, 23, 0),
    }
    dealloc_pd_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    // ---- queue counters: mlx5_ifc.h alloc_/dealloc_/query_q_counter_{in,out} (the
    // counter set a QP names in qpc.counter_set_id; Linux mlx5_ib's hw_counters read them) ----
    alloc_q_counter_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
    }
    alloc_q_counter_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        counter_set_id = F(0x08, 7, 0),
    }
    dealloc_q_counter_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        counter_set_id = F(0x08, 7, 0),
    }
    dealloc_q_counter_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_q_counter_in [0x20] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        clear = F(0x18, 31, 31),
        aggregate = F(0x18, 30, 30),
        counter_set_id = F(0x1c, 7, 0),
    }
    query_q_counter_out [0x100] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rx_write_requests = F(0x10, 31, 0),
        rx_read_requests = F(0x18, 31, 0),
        rx_atomic_requests = F(0x20, 31, 0),
        rx_dct_connect = F(0x28, 31, 0),
        out_of_buffer = F(0x30, 31, 0),
        out_of_sequence = F(0x38, 31, 0),
        duplicate_request = F(0x40, 31, 0),
        rnr_nak_retry_err = F(0x48, 31, 0),
        packet_seq_err = F(0x50, 31, 0),
        implied_nak_seq_err = F(0x58, 31, 0),
        local_ack_timeout_err = F(0x60, 31, 0),
        req_rnr_retries_exceeded = F(0x70, 31, 0),
        resp_local_length_error = F(0x78, 31, 0),
        req_local_length_error = F(0x7c, 31, 0),
        resp_local_qp_error = F(0x80, 31, 0),
        local_operation_error = F(0x84, 31, 0),
        resp_local_protection = F(0x88, 31, 0),
        req_local_protection = F(0x8c, 31, 0),
        resp_cqe_error = F(0x90, 31, 0),
        req_cqe_error = F(0x94, 31, 0),
        req_mw_binding = F(0x98, 31, 0),
        req_bad_response = F(0x9c, 31, 0),
        req_remote_invalid_request = F(0xa0, 31, 0),
        resp_remote_invalid_request = F(0xa4, 31, 0),
        req_remote_access_errors = F(0xa8, 31, 0),
        resp_remote_access_errors = F(0xac, 31, 0),
        req_remote_operation_errors = F(0xb0, 31, 0),
        req_transport_retries_exceeded = F(0xb4, 31, 0),
        cq_overflow = F(0xb8, 31, 0),
        resp_cqe_flush_error = F(0xbc, 31, 0),
        req_cqe_flush_error = F(0xc0, 31, 0),
    }
    alloc_transport_domain_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    alloc_transport_domain_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        transport_domain = F(0x08, 23, 0),
    }
    dealloc_transport_domain_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        transport_domain = F(0x08, 23, 0),
    }
    dealloc_transport_domain_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_special_contexts_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    query_special_contexts_out [0x20] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        dump_fill_mkey = F(0x08, 31, 0),
        resd_lkey = F(0x0c, 31, 0),
        null_mkey = F(0x10, 31, 0),
    }
    create_mkey_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        pg_access = F(0x0c, 31, 31),
        mkey_umem_valid = F(0x0c, 30, 30),
        memory_key_mkey_entry = S(0x10, &mkc::LAYOUT),
        translations_octword_actual_size = F(0x60, 31, 0),
        klm_pas_mtt = F(0x110, 31, 0),
    }
    create_mkey_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        mkey_index = F(0x08, 23, 0),
    }
    destroy_mkey_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        mkey_index = F(0x08, 23, 0),
    }
    destroy_mkey_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    // Linux include/linux/mlx5/mlx5_ifc.h query_vport_state_in/out; op_mod 0 = vNIC vport
    // (MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT), state 0 = down, 1 = up (vport.h MLX5_VPORT_STATE_*).
    query_vport_state_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
    }
    query_vport_state_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        admin_state = F(0x0c, 7, 4),
        state = F(0x0c, 3, 0),
    }
    query_nic_vport_context_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        allowed_list_type = F(0x0c, 26, 24),
    }
    query_nic_vport_context_out [0x110] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        nic_vport_context = S(0x10, &nic_vport_context::LAYOUT),
    }
    modify_nic_vport_context_in [0x200] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        field_select = S(0xc, &modify_nic_vport_field_select::LAYOUT),
        nic_vport_context = S(0x100, &nic_vport_context::LAYOUT),
    }
    modify_nic_vport_context_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    set_roce_address_in [0x30] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        roce_address_index = F(0x08, 31, 16),
        vhca_port_num = F(0x08, 3, 0),
        roce_address = S(0x10, &roce_addr_layout::LAYOUT),
    }
    set_roce_address_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_roce_address_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        roce_address_index = F(0x08, 31, 16),
        vhca_port_num = F(0x08, 3, 0),
    }
    query_roce_address_out [0x30] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        roce_address = S(0x10, &roce_addr_layout::LAYOUT),
    }
    create_cq_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        cq_context = S(0x10, &cqc::LAYOUT),
        pas = B(0x110, 0x8),
    }
    create_cq_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        cqn = F(0x08, 23, 0),
    }
    destroy_cq_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        cqn = F(0x08, 23, 0),
    }
    destroy_cq_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_cq_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        cqn = F(0x08, 23, 0),
    }
    query_cq_out [0x110] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        cq_context = S(0x10, &cqc::LAYOUT),
        pas = B(0x110, 0x8),
    }
    query_qp_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
    }
    query_qp_out [0x110] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        opt_param_mask = F(0x10, 31, 0),
        qpc = S(0x18, &qpc::LAYOUT),
        pas = B(0x110, 0x8),
    }
    create_qp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        opt_param_mask = F(0x10, 31, 0),
        qpc = S(0x18, &qpc::LAYOUT),
        wq_umem_id = F(0x108, 31, 0),
        wq_umem_valid = F(0x10c, 31, 31),
        pas = B(0x110, 0x8),
    }
    create_qp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        qpn = F(0x08, 23, 0),
    }
    rst2init_qp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
        opt_param_mask = F(0x10, 31, 0),
        qpc = S(0x18, &qpc::LAYOUT),
    }
    rst2init_qp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    init2rtr_qp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
        opt_param_mask = F(0x10, 31, 0),
        qpc = S(0x18, &qpc::LAYOUT),
    }
    init2rtr_qp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    rtr2rts_qp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
        opt_param_mask = F(0x10, 31, 0),
        qpc = S(0x18, &qpc::LAYOUT),
    }
    rtr2rts_qp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    qp_2err_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
    }
    qp_2err_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    qp_2rst_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
    }
    qp_2rst_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    destroy_qp_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        qpn = F(0x08, 23, 0),
    }
    destroy_qp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    // ---- raw Ethernet queues and NIC receive steering (mlx5_ifc.h) ----
    tisc [0xa0] {
        strict_lag_tx_port_affinity = F(0x00, 31, 31),
        tls_en = F(0x00, 30, 30),
        lag_tx_port_affinity = F(0x00, 27, 24),
        prio = F(0x00, 19, 16),
        transport_domain = F(0x24, 23, 0),
        underlay_qpn = F(0x28, 23, 0),
        pd = F(0x2c, 23, 0),
    }
    create_tis_in [0xc0] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        ctx = S(0x20, &tisc::LAYOUT),
    }
    create_tis_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        tisn = F(0x08, 23, 0),
    }
    destroy_tis_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        tisn = F(0x08, 23, 0),
    }
    cmd_pas [0x8] {
        pa_h = F(0x00, 31, 0),
        pa_l = F(0x04, 31, 12),
    }
    wq [0xc0] {
        wq_type = F(0x00, 31, 28),
        wq_signature = F(0x00, 27, 27),
        end_padding_mode = F(0x00, 26, 25),
        cd_slave = F(0x00, 24, 24),
        hds_skip_first_sge = F(0x04, 31, 31),
        log2_hds_buf_size = F(0x04, 30, 28),
        page_offset = F(0x04, 20, 16),
        lwm = F(0x04, 15, 0),
        pd = F(0x08, 23, 0),
        uar_page = F(0x0c, 23, 0),
        dbr_addr = B(0x10, 0x8),
        hw_counter = F(0x18, 31, 0),
        sw_counter = F(0x1c, 31, 0),
        log_wq_stride = F(0x20, 19, 16),
        log_wq_pg_sz = F(0x20, 12, 8),
        log_wq_sz = F(0x20, 4, 0),
        log_wqe_num_of_strides = F(0x24, 10, 8),
        two_byte_shift_en = F(0x24, 7, 7),
        log_wqe_stride_size = F(0x24, 2, 0),
        pas = S(0xc0, &cmd_pas::LAYOUT),
    }
    sqc [0xf0] {
        rlky = F(0x00, 31, 31),
        cd_master = F(0x00, 30, 30),
        fre = F(0x00, 29, 29),
        flush_in_error_en = F(0x00, 28, 28),
        allow_multi_pkt_send_wqe = F(0x00, 27, 27),
        min_wqe_inline_mode = F(0x00, 26, 24),
        state = F(0x00, 23, 20),
        reg_umr = F(0x00, 19, 19),
        allow_swp = F(0x00, 18, 18),
        ts_format = F(0x00, 5, 4),
        user_index = F(0x04, 23, 0),
        cqn = F(0x08, 23, 0),
        packet_pacing_rate_limit_index = F(0x1c, 15, 0),
        tis_lst_sz = F(0x20, 31, 16),
        qos_queue_group_id = F(0x20, 15, 0),
        tis_num_0 = F(0x2c, 23, 0),
        wq = S(0x30, &wq::LAYOUT),
    }
    create_sq_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        ctx = S(0x20, &sqc::LAYOUT),
    }
    create_sq_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        sqn = F(0x08, 23, 0),
    }
    modify_sq_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        sq_state = F(0x08, 31, 28),
        sqn = F(0x08, 23, 0),
        modify_bitmask = B(0x10, 0x8),
        sq_context = S(0x20, &sqc::LAYOUT),
    }
    destroy_sq_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        sqn = F(0x08, 23, 0),
    }
    rqc [0xf0] {
        rlky = F(0x00, 31, 31),
        delay_drop_en = F(0x00, 30, 30),
        scatter_fcs = F(0x00, 29, 29),
        vsd = F(0x00, 28, 28),
        mem_rq_type = F(0x00, 27, 24),
        state = F(0x00, 23, 20),
        flush_in_error_en = F(0x00, 18, 18),
        ts_format = F(0x00, 5, 4),
        user_index = F(0x04, 23, 0),
        cqn = F(0x08, 23, 0),
        counter_set_id = F(0x0c, 31, 24),
        rmpn = F(0x10, 23, 0),
        wq = S(0x30, &wq::LAYOUT),
    }
    create_rq_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        ctx = S(0x20, &rqc::LAYOUT),
    }
    create_rq_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rqn = F(0x08, 23, 0),
    }
    modify_rq_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        rq_state = F(0x08, 31, 28),
        rqn = F(0x08, 23, 0),
        modify_bitmask = B(0x10, 0x8),
        ctx = S(0x20, &rqc::LAYOUT),
    }
    destroy_rq_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        rqn = F(0x08, 23, 0),
    }
    // ---- RMP: the shared receive queue as ISSI-1 firmware offers it (mlx5_ifc.h rmpc, *_rmp_*) ----
    rmpc [0xf0] {
        state = F(0x00, 23, 20),
        basic_cyclic_rcv_wqe = F(0x04, 31, 31),
        wq = S(0x30, &wq::LAYOUT),
    }
    create_rmp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        ctx = S(0x20, &rmpc::LAYOUT),
    }
    create_rmp_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rmpn = F(0x08, 23, 0),
    }
    rmp_bitmask [0x8] {
        lwm = F(0x04, 0, 0),
    }
    modify_rmp_in [0x110] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        rmp_state = F(0x08, 31, 28),
        rmpn = F(0x08, 23, 0),
        bitmask = S(0x10, &rmp_bitmask::LAYOUT),
        ctx = S(0x20, &rmpc::LAYOUT),
    }
    destroy_rmp_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        rmpn = F(0x08, 23, 0),
    }
    query_rmp_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        rmpn = F(0x08, 23, 0),
    }
    query_rmp_out [0x110] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        rmp_context = S(0x20, &rmpc::LAYOUT),
    }
    rx_hash_field_select [0x4] {
        l3_prot_type = F(0x00, 31, 31),
        l4_prot_type = F(0x00, 30, 30),
        selected_fields = F(0x00, 29, 0),
    }
    tirc [0xf0] {
        disp_type = F(0x04, 31, 28),
        lro_timeout_period_usecs = F(0x10, 27, 12),
        lro_enable_mask = F(0x10, 11, 8),
        lro_max_ip_payload_size = F(0x10, 7, 0),
        inline_rqn = F(0x1c, 23, 0),
        rx_hash_symmetric = F(0x20, 31, 31),
        tunneled_offload_en = F(0x20, 29, 29),
        indirect_table = F(0x20, 23, 0),
        rx_hash_fn = F(0x24, 31, 28),
        self_lb_block = F(0x24, 25, 24),
        transport_domain = F(0x24, 23, 0),
        rx_hash_toeplitz_key = B(0x28, 0x28),
        rx_hash_field_selector_outer = S(0x50, &rx_hash_field_select::LAYOUT),
        rx_hash_field_selector_inner = S(0x54, &rx_hash_field_select::LAYOUT),
    }
    create_tir_in [0x110] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        ctx = S(0x20, &tirc::LAYOUT),
    }
    create_tir_out [0x10] {
        status = F(0x00, 31, 24),
        icm_address_63_40 = F(0x00, 23, 0),
        syndrome = F(0x04, 31, 0),
        icm_address_39_32 = F(0x08, 31, 24),
        tirn = F(0x08, 23, 0),
        icm_address_31_0 = F(0x0c, 31, 0),
    }
    destroy_tir_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        tirn = F(0x08, 23, 0),
    }
    flow_table_context [0x28] {
        reformat_en = F(0x00, 31, 31),
        decap_en = F(0x00, 30, 30),
        sw_owner = F(0x00, 29, 29),
        termination_table = F(0x00, 28, 28),
        table_miss_action = F(0x00, 27, 24),
        level = F(0x00, 23, 16),
        log_size = F(0x00, 7, 0),
        table_miss_id = F(0x04, 23, 0),
        lag_master_next_table_id = F(0x08, 23, 0),
        sw_owner_icm_root_1 = B(0x18, 0x8),
        sw_owner_icm_root_0 = B(0x20, 0x8),
    }
    create_flow_table_in [0x40] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        flow_table_context = S(0x18, &flow_table_context::LAYOUT),
    }
    create_flow_table_out [0x10] {
        status = F(0x00, 31, 24),
        icm_address_63_40 = F(0x00, 23, 0),
        syndrome = F(0x04, 31, 0),
        icm_address_39_32 = F(0x08, 31, 24),
        table_id = F(0x08, 23, 0),
        icm_address_31_0 = F(0x0c, 31, 0),
    }
    destroy_flow_table_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
    }
    fte_match_set_lyr_2_4 [0x40] {
        smac_47_16 = F(0x00, 31, 0),
        smac_15_0 = F(0x04, 31, 16),
        ethertype = F(0x04, 15, 0),
        dmac_47_16 = F(0x08, 31, 0),
        dmac_15_0 = F(0x0c, 31, 16),
        first_prio = F(0x0c, 15, 13),
        first_cfi = F(0x0c, 12, 12),
        first_vid = F(0x0c, 11, 0),
        ip_protocol = F(0x10, 31, 24),
        ip_dscp = F(0x10, 23, 18),
        ip_ecn = F(0x10, 17, 16),
        cvlan_tag = F(0x10, 15, 15),
        svlan_tag = F(0x10, 14, 14),
        frag = F(0x10, 13, 13),
        ip_version = F(0x10, 12, 9),
        tcp_flags = F(0x10, 8, 0),
        tcp_sport = F(0x14, 31, 16),
        tcp_dport = F(0x14, 15, 0),
        ttl_hoplimit = F(0x18, 7, 0),
        udp_sport = F(0x1c, 31, 16),
        udp_dport = F(0x1c, 15, 0),
        src_ipv4_src_ipv6 = B(0x20, 0x10),
        dst_ipv4_dst_ipv6 = B(0x30, 0x10),
    }
    fte_match_set_misc [0x40] {
        source_sqn = F(0x00, 23, 0),
        source_port = F(0x04, 15, 0),
        outer_second_prio = F(0x08, 31, 29),
        outer_second_cfi = F(0x08, 28, 28),
        outer_second_vid = F(0x08, 27, 16),
        inner_second_prio = F(0x08, 15, 13),
        inner_second_cfi = F(0x08, 12, 12),
        inner_second_vid = F(0x08, 11, 0),
        outer_second_cvlan_tag = F(0x0c, 31, 31),
        inner_second_cvlan_tag = F(0x0c, 30, 30),
        outer_second_svlan_tag = F(0x0c, 29, 29),
        inner_second_svlan_tag = F(0x0c, 28, 28),
        outer_emd_tag = F(0x0c, 27, 27),
        gre_protocol = F(0x0c, 15, 0),
        gre_key_h = F(0x10, 31, 8),
        gre_key_l = F(0x10, 7, 0),
        vxlan_vni = F(0x14, 31, 8),
        outer_ipv6_flow_label = F(0x1c, 19, 0),
        inner_ipv6_flow_label = F(0x20, 19, 0),
        bth_dst_qp = F(0x28, 23, 0),
        inner_esp_spi = F(0x2c, 31, 0),
        outer_esp_spi = F(0x30, 31, 0),
        outer_emd_tag_data = B(0x38, 0x6),
    }
    fte_match_param [0x200] {
        outer_headers = S(0x0, &fte_match_set_lyr_2_4::LAYOUT),
        misc_parameters = S(0x40, &fte_match_set_misc::LAYOUT),
        inner_headers = S(0x80, &fte_match_set_lyr_2_4::LAYOUT),
    }
    create_flow_group_in [0x400] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        start_flow_index = F(0x1c, 31, 0),
        end_flow_index = F(0x24, 31, 0),
        match_criteria_enable = F(0x3c, 7, 0),
        match_criteria = S(0x40, &fte_match_param::LAYOUT),
    }
    create_flow_group_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        group_id = F(0x08, 23, 0),
    }
    destroy_flow_group_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        group_id = F(0x18, 31, 0),
    }
    dest_format_struct [0x8] {
        destination_type = F(0x00, 31, 24),
        destination_id = F(0x00, 23, 0),
    }
    flow_context [0x300] {
        tpid = F(0x00, 31, 16),
        vlan_pcp = F(0x00, 15, 13),
        vlan_dei = F(0x00, 12, 12),
        vlan_id = F(0x00, 11, 0),
        group_id = F(0x04, 31, 0),
        flow_tag = F(0x08, 23, 0),
        action = F(0x0c, 15, 0),
        extended_destination = F(0x10, 31, 31),
        destination_list_size = F(0x10, 23, 0),
        flow_counter_list_size = F(0x14, 23, 0),
        encap_id = F(0x18, 31, 0),
        modify_header_id = F(0x1c, 31, 0),
        match_value = S(0x40, &fte_match_param::LAYOUT),
        destination = B(0x300, 0x8),
    }
    set_fte_in [0x340] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        modify_enable_mask = F(0x18, 7, 0),
        flow_index = F(0x20, 31, 0),
        flow_context = S(0x40, &flow_context::LAYOUT),
    }
    delete_fte_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        flow_index = F(0x20, 31, 0),
    }
    set_flow_table_root_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        underlay_qpn = F(0x18, 23, 0),
    }
    // ---- Ethernet segment of a raw SQ WQE (qp.h mlx5_wqe_eth_seg) ----
    wqe_eth_seg [0x10] {
        swp_outer_l4_offset = F(0x00, 31, 24),
        cs_flags = F(0x04, 31, 24),
        mss = F(0x04, 15, 0),
        flow_table_metadata = F(0x08, 31, 0),
        inline_hdr_sz = F(0x0c, 31, 16),
        inline_hdr_start = B(0x0e, 2),
    }
}
