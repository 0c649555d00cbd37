//! The connect steps of a controller's queues: create a queue and start its CM connect, look
//! at the connect once (no wait); what a non-blocking reconnect (`controllers`) and the
//! bring-up (`bringup`) advance a call at a time.

use super::*;

impl<V: GroupVerbs> Host<V> {
    /// First step of a connect: the admin queue created and its CM connect started (no wait).
    /// The device must be up.
    pub(super) fn start_admin(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<(), Error<V::Error>> {
        let q = self.start_queue(verbs, env, 0, 32, 64, 8192)?;
        self.admin = Some(q);
        Ok(())
    }

    /// Whether the admin queue's CM connect finished (one look, no wait). An error leaves the
    /// admin queue released.
    pub(super) fn poll_admin(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>) -> Result<bool, Error<V::Error>> {
        let Some(q) = self.admin.as_ref() else { return Err(Error::CmFailed) };
        match self.poll_queue(verbs, env, q.cm) {
            Ok(done) => Ok(done),
            Err(e) => {
                let q = self.admin.take().expect("checked");
                q.destroy(verbs);
                Err(e)
            }
        }
    }

    /// Create the admin queue (`qid` 0) and start its CM connect (no wait).
    fn start_queue(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, depth: u16, capsule: usize, xfer: usize) -> Result<HQueue<V>, Error<V::Error>> {
        let mut q = HQueue::create(verbs, qid, depth, capsule, xfer, self.cfg.per_io_keys)?;
        let private = cm_req_private(qid, depth);
        match env.cm_connect(verbs, q.qpn, &private) {
            Ok(h) => {
                q.cm = h;
                Ok(q)
            }
            Err(()) => {
                q.destroy(verbs);
                Err(Error::CmFailed)
            }
        }
    }

    /// Create I/O queue `qid` (its own poll group, its QP parked with the device) and start
    /// its CM connect (no wait); once connected, [`IoQueue::attach`].
    pub(super) fn start_io_queue(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, qid: u16, depth: u16, capsule: usize, xfer: usize) -> Result<IoQueue<V>, Error<V::Error>> {
        let mut q = IoQueue::create(verbs, qid, depth, capsule, xfer, self.cfg.per_io_keys)?;
        let private = cm_req_private(qid, depth);
        match env.cm_connect(verbs, q.q.qpn, &private) {
            Ok(h) => {
                q.q.cm = h;
                Ok(q)
            }
            Err(()) => {
                q.destroy(verbs);
                Err(Error::CmFailed)
            }
        }
    }

    /// One look at a queue's CM connect: connected (true), pending (false), or refused (the
    /// caller releases the queue; the env forgot the handle).
    pub(super) fn poll_queue(&mut self, verbs: &mut V, env: &mut impl HostEnv<V>, handle: u32) -> Result<bool, Error<V::Error>> {
        match env.cm_poll(verbs, handle) {
            ConnectPoll::Pending => Ok(false),
            ConnectPoll::Connected { .. } => Ok(true),
            ConnectPoll::Rejected(sts) => Err(Error::CmRejected(sts)),
            ConnectPoll::Failed => Err(Error::CmFailed),
        }
    }
}
