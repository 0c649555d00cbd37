//! Event and completion queues [mlx5_ifc.h eqc, cqc, CREATE/DESTROY_EQ, CREATE/DESTROY/QUERY_CQ].

#[allow(unused_imports)]
use super::*;

layouts! {
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
}
