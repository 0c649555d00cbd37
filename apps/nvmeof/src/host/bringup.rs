//! The rest of a controller's connect once its admin queue's CM connect is done, as steps
//! that never wait: Fabrics Connect, CAP, CC.EN, CSTS.RDY, VS, Identify Controller, Number of
//! Queues, AEN configuration (+ the AER), each I/O queue (its CM connect, its Fabrics
//! Connect), the active namespace list and each namespace. [`BringUp::step`] submits a
//! step's command or looks once for its answer; a reconnect (`controllers`) advances it once
//! per poll, so a slow target costs the others nothing; [`Host::connect`] loops on it.
//! Keep Alive runs from Identify Controller on (`Host::tick`, between the bring-up's own admin
//! commands). Not yet non-blocking: a DH-HMAC-CHAP exchange the target asks for at a Fabrics Connect.

use super::*;

/// Where a bring-up is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Connect,
    Cap,
    Enable,
    Ready { start: u64 },
    Version,
    IdentifyCtrl,
    NumQueues,
    AenConfig,
    /// I/O queue `qid`: its CM connect, then its Fabrics Connect.
    IoCm { qid: u16 },
    IoConnect { qid: u16 },
    NsList,
    /// Identify Namespace for `ids[i]`.
    IdNs { i: usize },
    Done,
}

/// One controller's bring-up after the admin queue connected.
pub(super) struct BringUp<V: GroupVerbs> {
    step: Step,
    /// The step's command in flight: (queue, slot, submitted at).
    cmd: Option<(u16, u16, u64)>,
    /// The I/O queue whose CM connect is in flight, since when.
    ioq: Option<(IoQueue<V>, u64)>,
    cntlid: u16,
    cap: u64,
    vs: u32,
    granted: u16,
    depth: u16,
    xfer: usize,
    capsule: usize,
    ids: Vec<u32>,
    page: Vec<u8>,
    /// This bring-up's Identify Controller was answered: Keep Alive runs. (Not `Host::ctrl`,
    /// which a reconnect still holds from the previous connection: ticking on it sent a Keep
    /// Alive before the new admin queue's Fabrics Connect, a Command Sequence Error.)
    keep_alive: bool,
}

impl<V: GroupVerbs> BringUp<V> {
    pub(super) fn new() -> Self {
        BringUp { step: Step::Connect, cmd: None, ioq: None, cntlid: 0, cap: 0, vs: 0, granted: 0, depth: 0, xfer: 0, capsule: 0, ids: Vec::new(), page: Vec::new(), keep_alive: false }
    }

    /// Release what the bring-up holds beyond the host's queues (an I/O queue whose CM
    /// connect is in flight); the caller tears the host down.
    pub(super) fn abandon(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) {
        if let Some((q, _)) = self.ioq.take() {
            env.cm_disconnect(verbs, q.q.cm);
            q.destroy(verbs);
        }
        self.cmd = None;
    }

    /// The earliest time [`BringUp::step`] has timer work: its command or I/O queue connect
    /// timing out, the host's Keep Alive (from Identify Controller on); 0 (at once) when the
    /// next command is still to be sent.
    pub(super) fn next_timer(&self, h: &Host<V>) -> Option<u64> {
        let timeout = h.cfg.timeout_ns + 1;
        let own = match (self.step, self.cmd, &self.ioq) {
            (Step::Done, ..) => return Some(0),
            (Step::IoCm { .. }, _, Some((_, since))) => since.saturating_add(timeout),
            (Step::IoCm { .. }, _, None) => 0,
            (_, Some((_, _, since)), _) => since.saturating_add(timeout),
            (_, None, _) => 0,
        };
        // As `step`: the host's keep-alive is ticked only while no bring-up command of its own
        // is in flight on the admin queue (that command's timeout is the timer then).
        let ka = if self.keep_alive && !matches!(self.cmd, Some((0, _, _))) { h.next_timer() } else { None };
        Some(ka.map_or(own, |k| k.min(own)))
    }

    /// One step: `Ok(true)` once the controller is ready for I/O, `Ok(false)` while waiting
    /// for the target. On an error the caller calls [`BringUp::abandon`] and tears down.
    pub(super) fn step(&mut self, h: &mut Host<V>, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<bool, Error<V::Error>> {
        let now = env.now_ns();
        if self.step == Step::Done {
            return Ok(true);
        }
        // Keep Alive from the end of controller enable (Identify Controller set the KATO the
        // target's timer has run by since the admin Connect), not from the end of the
        // bring-up: the I/O queues' connects may take longer than the KATO. The admin queue is
        // looked at only while no bring-up command of its own is in flight on it.
        if self.keep_alive && !matches!(self.cmd, Some((0, _, _))) {
            h.tick(verbs, now)?;
        }
        match self.step {
            Step::IoCm { qid } => return self.io_cm(h, verbs, env, qid, now),
            _ => {}
        }
        let Some((qid, slot, since)) = self.cmd else {
            let qid = self.submit(h, verbs, now)?;
            return Ok(self.step == Step::Done && qid == u16::MAX);
        };
        let want_data = matches!(self.step, Step::IdentifyCtrl | Step::NsList | Step::IdNs { .. });
        let out = if want_data { Some(&mut self.page[..]) } else { None };
        let Some((dw0, dw1)) = h.poll_cmd(verbs, now, qid, slot, out)? else {
            if now.saturating_sub(since) > h.cfg.timeout_ns {
                return Err(Error::Timeout);
            }
            return Ok(false);
        };
        self.cmd = None;
        self.answered(h, verbs, env, dw0, dw1, now)?;
        Ok(self.step == Step::Done)
    }

    /// Submit the current step's command; returns its queue (u16::MAX: no command, the step
    /// moved on).
    fn submit(&mut self, h: &mut Host<V>, verbs: &mut V, now: u64) -> Result<u16, Error<V::Error>> {
        let (qid, sqe, data): (u16, Sqe, Option<Data<'_>>);
        let connect;
        match self.step {
            Step::Connect | Step::IoConnect { .. } => {
                let q = if let Step::IoConnect { qid } = self.step { qid } else { 0 };
                let cntlid = if q == 0 { CNTLID_DYNAMIC } else { self.cntlid };
                connect = h.connect_cmd(q, cntlid);
                let inline = q > 0 && h.queue_mut(q).capsule.saturating_sub(64) >= ConnectData::SIZE && h.ctrl.as_ref().is_some_and(|c| c.sgls & sgls::OFFSET != 0);
                let bytes = connect.1.as_bytes();
                (qid, sqe, data) = (q, connect.0, Some(if inline { Data::Inline(bytes) } else { Data::Out(bytes) }));
            }
            Step::Cap => (qid, sqe, data) = (0, property_get_sqe(prop::CAP, true), None),
            Step::Enable => (qid, sqe, data) = (0, property_set_sqe(prop::CC, CC_ENABLE.into_bits() as u64), None),
            Step::Ready { .. } => (qid, sqe, data) = (0, property_get_sqe(prop::CSTS, false), None),
            Step::Version => (qid, sqe, data) = (0, property_get_sqe(prop::VS, false), None),
            Step::IdentifyCtrl | Step::NsList | Step::IdNs { .. } => {
                self.page.clear();
                self.page.resize(4096, 0);
                let (cns, nsid) = match self.step {
                    Step::IdentifyCtrl => (cns::CONTROLLER, 0),
                    Step::NsList => (cns::ACTIVE_NS_LIST, 0),
                    Step::IdNs { i } => (cns::NAMESPACE, self.ids[i]),
                    _ => unreachable!("identify steps"),
                };
                (qid, sqe, data) = (0, identify_sqe(cns, nsid), Some(Data::In(&mut self.page[..])));
            }
            Step::NumQueues => {
                let mut sf = cmd(admin_op::SET_FEATURES);
                let n = h.cfg.io_queues.max(1) as u32 - 1;
                sf.cdw10 = U32::new(fid::NUM_QUEUES as u32);
                sf.cdw11 = U32::new(n | (n << 16));
                (qid, sqe, data) = (0, sf, None);
            }
            Step::AenConfig => {
                let mut sf = cmd(admin_op::SET_FEATURES);
                sf.cdw10 = U32::new(fid::ASYNC_EVENT_CONFIG as u32);
                sf.cdw11 = U32::new(AEC_NS_ATTR);
                (qid, sqe, data) = (0, sf, None);
            }
            Step::IoCm { .. } | Step::Done => return Ok(u16::MAX),
        }
        let slot = h.start_cmd(verbs, now, qid, sqe, data)?;
        self.cmd = Some((qid, slot, now));
        Ok(qid)
    }

    /// The current step's command was answered with `dw0`/`dw1` (and `page` for Identify).
    fn answered(&mut self, h: &mut Host<V>, verbs: &mut V, env: &mut impl HostEnv<V>, dw0: u32, dw1: u32, now: u64) -> Result<(), Error<V::Error>> {
        self.step = match self.step {
            Step::Connect => {
                self.cntlid = validate::cntlid(dw0 as u16)?;
                h.authenticate_if_asked(verbs, env, 0, dw0)?;
                Step::Cap
            }
            Step::Cap => {
                self.cap = dw0 as u64 | (dw1 as u64) << 32;
                // CC.MPS 0 (4 KiB pages) must lie within CAP.MPSMIN..MPSMAX.
                validate::transfer_limit(Cap::from_bits(self.cap), 0)?;
                Step::Enable
            }
            Step::Enable => Step::Ready { start: now },
            Step::Ready { start } => {
                let csts = Csts::from_bits(dw0);
                if csts.cfs() {
                    return Err(Error::Protocol("controller fatal status after enable"));
                }
                if csts.rdy() {
                    Step::Version
                } else if now.saturating_sub(start) > Cap::from_bits(self.cap).ready_timeout_ns() {
                    return Err(Error::Timeout);
                } else {
                    Step::Ready { start }
                }
            }
            Step::Version => {
                self.vs = dw0;
                Step::IdentifyCtrl
            }
            Step::IdentifyCtrl => {
                let capf = Cap::from_bits(self.cap);
                let id = IdentifyCtrl::read_from_bytes(&self.page).expect("4096");
                let info = h.controller_info(self.cntlid, capf, self.vs, &id)?;
                let discovery = h.subnqn == DISCOVERY_NQN;
                self.capsule = if discovery { 0 } else { validate::capsule_size(info.ioccsz, id.iorcsz.get())? };
                if !discovery && info.kas == 0 {
                    return Err(Error::Protocol("KAS == 0"));
                }
                self.depth = validate::io_depth(h.cfg.io_depth, validate::queue_entries(capf)?, info.maxcmd);
                self.xfer = (h.cfg.max_io_bytes as u64).min(info.mdts_bytes) as usize;
                h.ctrl = Some(info);
                h.last_ka_ns = now;
                self.keep_alive = true;
                if discovery {
                    Step::Done
                } else {
                    Step::NumQueues
                }
            }
            Step::NumQueues => {
                self.granted = ((dw0 & 0xFFFF).min(dw0 >> 16) + 1).min(h.cfg.io_queues as u32) as u16;
                if h.ctrl.as_ref().is_some_and(|c| c.oaes & OAES_NS_ATTR != 0) {
                    Step::AenConfig
                } else {
                    self.first_io_queue()
                }
            }
            Step::AenConfig => {
                h.post_aer(verbs, now)?;
                self.first_io_queue()
            }
            Step::IoConnect { qid } => {
                h.authenticate_if_asked(verbs, env, qid, dw0)?;
                if qid < self.granted {
                    Step::IoCm { qid: qid + 1 }
                } else {
                    Step::NsList
                }
            }
            Step::NsList => {
                self.ids.clear();
                let ids = &mut self.ids;
                validate::ns_list(&self.page, |id| ids.push(id))?;
                h.namespaces.clear();
                if self.ids.is_empty() {
                    Step::Done
                } else {
                    Step::IdNs { i: 0 }
                }
            }
            Step::IdNs { i } => {
                let ns = IdentifyNs::read_from_bytes(&self.page).expect("4096");
                h.namespaces.push(validate::namespace(self.ids[i], &ns)?);
                if i + 1 < self.ids.len() {
                    Step::IdNs { i: i + 1 }
                } else {
                    Step::Done
                }
            }
            s @ (Step::IoCm { .. } | Step::Done) => s,
        };
        Ok(())
    }

    fn first_io_queue(&self) -> Step {
        if self.granted == 0 {
            Step::NsList
        } else {
            Step::IoCm { qid: 1 }
        }
    }

    /// I/O queue `qid`'s CM connect: started, or looked at once.
    fn io_cm(&mut self, h: &mut Host<V>, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, now: u64) -> Result<bool, Error<V::Error>> {
        let Some((q, since)) = self.ioq.take() else {
            let q = h.start_io_queue(verbs, env, qid, self.depth, self.capsule, self.xfer)?;
            self.ioq = Some((q, now));
            return Ok(false);
        };
        match h.poll_queue(verbs, env, q.q.cm) {
            Ok(true) => {
                // Connected: the QP goes into the queue's group, which drives it from now on.
                let mut q = q;
                if let Err(e) = q.attach(verbs) {
                    env.cm_disconnect(verbs, q.q.cm);
                    q.destroy(verbs);
                    return Err(e);
                }
                h.io.push(q);
                self.step = Step::IoConnect { qid };
                Ok(false)
            }
            Ok(false) if now.saturating_sub(since) <= h.cfg.timeout_ns => {
                self.ioq = Some((q, since));
                Ok(false)
            }
            Ok(false) => {
                env.cm_disconnect(verbs, q.q.cm);
                q.destroy(verbs);
                Err(Error::Timeout)
            }
            Err(e) => {
                q.destroy(verbs);
                Err(e)
            }
        }
    }
}
