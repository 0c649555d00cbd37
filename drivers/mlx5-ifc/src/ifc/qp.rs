//! Queue pairs [mlx5_ifc.h ads (address path), qpc, CREATE/QUERY/DESTROY_QP and the state
//! transitions].

#[allow(unused_imports)]
use super::*;

layouts! {
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
}
