//! The device's own structures outside the command payloads: the initialization segment and
//! health buffer, the command queue entry and mailbox block [Linux device.h, rdma-core
//! mlx5_vfio.h], EQEs, the 64-byte CQE, send and receive WQE segments [qp.h, mlx5dv.h].

#[allow(unused_imports)]
use super::*;

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
