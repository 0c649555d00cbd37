//! Raw Ethernet queues [mlx5_ifc.h]: TIS, the work queue context shared by SQ, RQ and RMP,
//! SQ, RQ and TIR.

#[allow(unused_imports)]
use super::*;

layouts! {
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
}
