//! One-byte summaries of each node's digest row that a filter or score reads (flags, a
//! state), memoised per digest table so a pass over thousands of nodes reads a byte per node
//! instead of the row's cache line.
use loadstar_framework::CycleContext;
use loadstar_framework::snapshot::{ClusterSnapshot, Memo, NodeDigest, NodeView};

/// A one-byte summary of a node's row that a plugin's verdict reads (flags, a state), kept
/// for every node of a digest table as [`RowCodes`].
pub trait RowCode: Send + Sync + std::fmt::Debug + 'static {
    /// The code of `node`, whose row is `d`.
    fn code(d: &NodeDigest, node: &NodeView) -> u8;
}

/// [`RowCode::code`] of every node, in `nodes` order: built once per digest table
/// ([`CycleContext::memo`]) and patched with the row, so a pass reads one byte per node
/// instead of the row's line.
#[derive(Debug)]
pub struct RowCodes<C> {
    codes: Vec<u8>,
    /// How many codes are not 0.
    nonzero: usize,
    code: std::marker::PhantomData<fn() -> C>,
}

impl<C: RowCode> Memo for RowCodes<C> {
    /// The scheduler assumed a pod on one node: its code is computed again from its row.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        if self.codes.len() != snapshot.nodes().len() {
            return false;
        }
        match self.codes.get_mut(index) {
            Some(c) => {
                let new = C::code(row, node);
                self.nonzero = self.nonzero + usize::from(new != 0) - usize::from(*c != 0);
                *c = new;
                true
            }
            None => false,
        }
    }
}

impl<C: RowCode> RowCodes<C> {
    /// The cycle's codes, when its table has every row current.
    pub fn of(ctx: &CycleContext<'_>) -> Option<std::sync::Arc<RowCodes<C>>> {
        ctx.memo(0, || {
            let codes: Vec<u8> = ctx
                .snapshot
                .nodes()
                .iter()
                .map(|n| C::code(&ctx.digest(n), n))
                .collect();
            RowCodes {
                nonzero: codes.iter().filter(|c| **c != 0).count(),
                codes,
                code: std::marker::PhantomData,
            }
        })
    }

    /// Whether every code is 0 (no node has what the code marks).
    pub fn all_zero(&self) -> bool {
        self.nonzero == 0
    }
}

/// The code of the snapshot's node `index`: from `codes` when given, else from its row.
#[inline(always)]
pub fn code_at<C: RowCode>(
    codes: Option<&RowCodes<C>>,
    ctx: &CycleContext<'_>,
    index: usize,
) -> u8 {
    match codes.and_then(|c| c.codes.get(index)) {
        Some(&c) => c,
        None => C::code(&ctx.digest_at(index), &ctx.snapshot.nodes()[index]),
    }
}
