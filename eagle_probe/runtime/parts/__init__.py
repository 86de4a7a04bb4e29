"""The recorder's parts, one concern each. A new concern is a new module here and one line in PARTS; the order is the
order in which each observation and each periodic event is handed on."""

from .acceptance import Acceptance
from .block_draft import BlockDrafts
from .capture import CaptureLayers
from .costs import Costs
from .coverage import Coverage
from .draft import DraftFacts
from .dumps import Dumps
from .forwards import Forwards
from .slices import Slices
from .values import Values

PARTS = (
    Forwards,  # forward counts, the summary event
    CaptureLayers,  # capture set-up, forward shapes, layers seen per path
    DraftFacts,  # the draft's load-time facts and input widths, its layers against the target's
    BlockDrafts,  # DFlash / DSpark drafts: the target's capture for them, their facts and feed, their layer findings
    Values,  # fingerprints, reference, non-finite, identical slots
    Dumps,  # opt-in dumps of what the draft is fed
    Coverage,  # verified tokens inside the draft's vocabulary (before Acceptance: a collapse names it)
    Acceptance,  # per-step acceptance, windows, collapse
    Slices,  # acceptance by slice (analysis.slices.DIMENSIONS), per-request distribution
    Costs,  # the cost of each speculative step, the speed-up estimate (after Acceptance and Slices: it reads them)
)
