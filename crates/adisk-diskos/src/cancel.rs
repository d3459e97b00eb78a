//! A job's cancellation, as guest code and stages read it.

/// A job's cancellation as guest code's interrupt checks read it: without waiting, from any
/// thread (a user disklet's loop is stopped between two checks once it is set).
#[derive(Clone)]
pub struct CancelFlag(pub(crate) tokio::sync::watch::Receiver<bool>);

impl CancelFlag {
    /// Whether the job was cancelled.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// A flag that is never set (a disklet run outside any job: tests, tools).
    pub fn never() -> Self {
        CancelFlag(tokio::sync::watch::Sender::new(false).subscribe())
    }

    /// A flag and the sender that sets it (`send_replace(true)`).
    pub fn new() -> (tokio::sync::watch::Sender<bool>, Self) {
        let tx = tokio::sync::watch::Sender::new(false);
        let flag = CancelFlag(tx.subscribe());
        (tx, flag)
    }
}

/// A job's cancellation before its [`JobState`] exists (while its stages are built, which
/// runs user code): set if the admission is abandoned, e.g. its request dropped.
pub(crate) struct PendingCancel(Option<tokio::sync::watch::Sender<bool>>);

impl PendingCancel {
    pub(crate) fn new() -> Self {
        PendingCancel(Some(tokio::sync::watch::Sender::new(false)))
    }
    pub(crate) fn flag(&self) -> CancelFlag {
        CancelFlag(self.0.as_ref().expect("armed").subscribe())
    }
    /// The sender, for the job's state: the job owns its cancellation from here on.
    pub(crate) fn disarm(mut self) -> tokio::sync::watch::Sender<bool> {
        self.0.take().expect("armed")
    }
}

impl Drop for PendingCancel {
    fn drop(&mut self) {
        if let Some(tx) = &self.0 {
            tx.send_replace(true);
        }
    }
}
