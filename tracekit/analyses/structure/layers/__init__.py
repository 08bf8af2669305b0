"""Automatic layers: cut each step into a head, decoder layers and a tail, with no annotation (docs/layers.md).

How (per trace, the same for every step):

1. **Segments.** The main stream's kernels of each step (the stream with the most non-communication kernel time) are cut at every
   occurrence of one *boundary kernel*; each segment is labelled by its exact sequence of kernel names.
2. **Phases.** Labels that recur within a step are linked when they follow each other. A layer of ``k`` segments
   (attention half, FFN half: ``k = 2``) makes every cycle of that graph a multiple of ``k``, so ``k`` is the gcd
   of the cycle lengths of each connected part, and each label gets a phase ``0..k-1``. The phase whose segments
   hold the mixer kernels (attention, linear attention, state space: ``layer_role`` in the categories) opens a
   layer. Between two linked segments up to ``k-1`` segments of a unique label (a one-off dense layer among MoE
   layers) belong to the layer whose phases they complete; a unique segment similar to an expected one (edit
   distance within a quarter of its length) does too.
3. **Runs and their edges.** A run is a maximal chain of linked segments. A run whose first layer lacks its first
   segment(s) (the first layer's input norm missing or a different kernel) takes them from the end of the
   segment before it when that end aligns with the missing label within the edit budget; a run whose last layer
   lacks its last segment takes the next segment when it starts with the missing label (kernels added at the
   end, such as a draft model's final norm and lm_head). A later run (draft layers after the target model) takes
   the embedding kernels right before it. Runs of fewer than two layers are not layers.
4. **The boundary kernel** is the candidate (a kernel occurring at least three times in a step) whose layers form a
   *decoder stack* and agree best with the *structure*. The structure is counted without any boundary kernel:
   every mixer -> FFN transition of the step (an attention / linear-attention / state-space kernel, then an MLP or
   MoE kernel, other kernels skipped); a decoder layer holds exactly one. A decoder stack has a layer holding a
   mixer kernel, every layer type holding a mixer or an FFN kernel (a kernel repeating inside a layer leaves
   pieces with neither), at most max(3, a quarter of the layers) types and at least 3 kernels per layer. Among the
   candidates whose share of layers holding one transition is within 5 % of the best: norm kernels covering at
   least 90 % of the best coverage, then the most main-stream kernels covered, the fewest types, the kernel closest
   after the last GEMM before it (a decomposed norm's first kernel), the rarest. Norms are tried first: one
   covering 90 % of all main-stream kernels with one transition per layer ends the search. No mixer kernel, or no
   candidate left: **no decoder stack** (``layers`` raises MissingDataError, exit 4, in one sentence).
5. **Types.** A layer's type is its sequence of main-stream kernel names, communication kernels left out (a layer
   that ends with a collective keeps its type). Names come from the categories: the mixer labels (``attn``,
   ``mla``, ``kda``, ...) and the FFN label (``moe`` before ``mlp``), ``draft:`` for the types that never share a
   run with the target model's types (those of the longest run of any step) and follow such a run in some step,
   and the most expensive distinctive kernel when two types would share a name. A type whose layers differ only
   in durations is split into ``/fast`` and ``/slow`` when the durations of one of its mixer kernels form two
   clear clusters (sliding-window vs full attention; expert GEMMs, whose time varies with routing, never split a
   type).
6. **The check.** ``check`` compares the layers with the structure: ``agrees`` when every step has as many layers
   as transitions and every layer holds exactly one; otherwise a warning says the layers are not confirmed.

Side-stream work belongs to the window it starts in, as in the annotation engine. The candidates are the distinct
main-stream names occurring three times or more, and one candidate's assembly runs over every step at once in numpy
passes over its segments, not its kernels: a segment is labelled by a hash of its codes (running sums made once per
trace), checked against the previous segment of its label by the mismatch positions of their shift (made once per
trace and shift: a repeating layer's period covers most segments) or kernel by kernel; then the label graph, phases,
links and runs. Python walks the runs that can hold layers and the unique segments inside them; a candidate's
layers stay arrays, measured in numpy, and only the chosen one's become objects. A candidate whose phases bound its
coverage below a stack already found, and its agreement at or below the best so far, is not assembled (the answer is
the same: those bounded while a later stack raised the best agreement are assembled after all). An edit distance
runs its DP only when neither a lower bound nor a subsequence settles it.

The package's one public entry is this ``__init__``: ``find_layers`` (a ``LayerFinding``), the ``layers`` command,
``automatic_note`` (report's note), ``auto_main_stream`` and the window kinds ``HEAD``, ``BETWEEN``, ``TAIL``. Its
modules, each one job of the finder, in the order it runs them: ``sequences`` (the per-step main-stream sequences, read
once per trace), ``segments`` (steps 1-2: segments, labels, phases for one boundary kernel), ``assembly`` (step 3:
runs and their edges cut into layers, kept as arrays), ``alignment`` (the edit distances steps 2-3 ask),
``boundary`` (step 4 and 6: the boundary kernel and the check), ``type_names`` (step 5: type names, duration
splits), ``windows`` (the windows of every step), ``finding`` (``find_layers``: the steps in order, once per trace)
and ``command`` (``layers``: the tables and summary of ``tracekit layers``).
"""

from .command import automatic_note, layers
from .finding import LayerFinding, auto_main_stream, find_layers
from .windows import BETWEEN, HEAD, TAIL

__all__ = ["BETWEEN", "HEAD", "TAIL", "LayerFinding", "auto_main_stream", "automatic_note", "find_layers", "layers"]
