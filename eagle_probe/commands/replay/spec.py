"""The draft's architecture as SGLang 0.5.23's LlamaForCausalLMEagle3 reads it from config.json (no torch here).

What SGLang decides, and where (sglang/srt/models/llama_eagle3.py, llama.py, rotary_embedding/factory.py):
- fc input width: `target_hidden_size` (else `hidden_size`) times the number of aux states: `num_aux_hidden_states`,
  else the length of `eagle_config.eagle_aux_hidden_state_layer_ids`, else 3. fc has a bias when `bias` is true.
- `norm_before_fc`: `eagle_config.norm_before_fc`, else the top-level `norm_before_fc`: one RMSNorm over the whole
  concatenated aux input. `fc_norm` (or the legacy `use_aux_norm`): one RMSNorm per aux chunk. Both may be on
  (input norm first, then the per-chunk norms).
- fc runs only when the incoming width differs from the embedding width.
- lm_head: the embedding itself when `tie_word_embeddings`; the target's lm_head when `draft_vocab_size` is
  missing (`load_lm_head_from_target`); else the draft's own `[draft_vocab_size, hidden]`.
- embedding: the target's, except when `target_hidden_size` differs from `hidden_size` (set_embed keeps the
  draft's own then); with the lm_head from the target, set_embed_and_head always installs the target's.
- rope: `rope_parameters` (transformers 5) or `rope_scaling` with `rope_theta`; `head_dim` (else hidden/heads),
  `partial_rotary_factor`, `rope_is_neox_style` (default true), `max_position_embeddings` (default 8192).
- the MLP: `intermediate_size` (`intermediate_size_mlp` for llama4_text), silu only; attention bias
  (`attention_bias` or `bias`) on o_proj only: the draft's own qkv_proj is rebuilt without one.
"""

from dataclasses import dataclass, field

ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class ReplayInputError(Exception):
    """Bad input: the message names the file (or option) and what is wrong."""


@dataclass(frozen=True)
class RopeSpec:
    theta: float
    rotary_dim: int
    max_position: int
    neox: bool = True
    kind: str = "default"
    params: tuple[tuple[str, object], ...] = ()

    def param(self, name: str, default):
        return dict(self.params).get(name, default)


@dataclass(frozen=True)
class DraftSpec:
    file: str
    hidden_size: int
    target_hidden_size: int
    num_aux: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    vocab_size: int
    draft_vocab_size: int | None  # None: SGLang loads the target's lm_head
    tie_word_embeddings: bool
    norm_before_fc: bool
    fc_norm: bool
    fc_bias: bool
    o_bias: bool
    layer_ids: tuple[int, ...] | None
    rope: RopeSpec
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fc_in(self) -> int:
        return self.target_hidden_size * self.num_aux

    @property
    def lm_head_source(self) -> str:
        """'embedding' (tied), 'target' (no draft_vocab_size) or 'draft'."""
        if self.tie_word_embeddings:
            return "embedding"
        return "target" if self.draft_vocab_size is None else "draft"

    @property
    def sglang_embedding(self) -> str:
        """Whose embedding SGLang gives the draft: 'target' or 'own'."""
        if self.lm_head_source == "target":
            return "target"
        return "own" if self.target_hidden_size != self.hidden_size else "target"


def _get(data: dict, key: str, file: str, kind, default=None, required: bool = False):
    value = data.get(key, default)
    if value is None:
        if required:
            raise ReplayInputError(f"draft config {file}: missing key '{key}'")
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise ReplayInputError(f"draft config {file}: key '{key}' must be true or false, got {value!r}")
        return value
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ReplayInputError(f"draft config {file}: key '{key}' must be an integer, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ReplayInputError(f"draft config {file}: key '{key}' must be a number, got {value!r}")
    if kind is int and value < 1:
        raise ReplayInputError(f"draft config {file}: key '{key}' must be >= 1, got {value}")
    return kind(value)


def _rope(data: dict, file: str, head_dim: int) -> RopeSpec:
    params = data.get("rope_parameters")
    scaling = params if params is not None else data.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise ReplayInputError(f"draft config {file}: key 'rope_parameters' / 'rope_scaling' must be an object, "
                               f"got {scaling!r}")
    theta = (params or {}).get("rope_theta", data.get("rope_theta", 10000.0)) if params is not None \
        else data.get("rope_theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
        raise ReplayInputError(f"draft config {file}: rope_theta must be a positive number, got {theta!r}")
    factor = data.get("partial_rotary_factor", 1)
    rotary_dim = int(factor * head_dim)
    max_position = _get(data, "max_position_embeddings", file, int, 8192)
    kind = "default"
    extra = {}
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind is None:
            raise ReplayInputError(f"draft config {file}: rope scaling {scaling} names no 'rope_type'")
        if kind not in ROPE_TYPES:
            raise ReplayInputError(f"draft config {file}: rope type {kind!r} is not supported by replay "
                                   f"(supported: {', '.join(ROPE_TYPES)})")
        if "mrope_section" in scaling:
            raise ReplayInputError(f"draft config {file}: multimodal rope (mrope_section) is not supported by replay")
        extra = {k: v for k, v in scaling.items() if k not in ("rope_type", "type", "rope_theta")}
        if data.get("original_max_position_embeddings") is not None:
            extra["original_max_position_embeddings"] = data["original_max_position_embeddings"]
    neox = data.get("rope_is_neox_style", True)
    return RopeSpec(float(theta), rotary_dim, max_position, bool(neox), kind, tuple(sorted(extra.items())))


def attention_shape(data: dict, file: str) -> tuple[int, int, int, int]:
    """(hidden_size, heads, kv heads, head_dim) of a draft config's attention, checked."""
    hidden = _get(data, "hidden_size", file, int, required=True)
    heads = _get(data, "num_attention_heads", file, int, required=True)
    kv_heads = _get(data, "num_key_value_heads", file, int, heads)
    head_dim = _get(data, "head_dim", file, int, hidden // heads)
    if heads % kv_heads:
        raise ReplayInputError(f"draft config {file}: num_attention_heads {heads} is not a multiple of "
                               f"num_key_value_heads {kv_heads}")
    return hidden, heads, kv_heads, head_dim


def parse_draft_config(data: dict, file: str) -> DraftSpec:
    if not isinstance(data, dict):
        raise ReplayInputError(f"draft config {file}: not a JSON object")
    notes = []
    hidden, heads, kv_heads, head_dim = attention_shape(data, file)
    inter_key = "intermediate_size_mlp" if data.get("model_type") == "llama4_text" else "intermediate_size"
    inter = _get(data, inter_key, file, int, required=True)
    act = data.get("hidden_act", "silu")
    if act != "silu":
        raise ReplayInputError(f"draft config {file}: hidden_act {act!r}: SGLang's draft MLP supports silu only")
    eagle = data.get("eagle_config") or {}
    if not isinstance(eagle, dict):
        raise ReplayInputError(f"draft config {file}: key 'eagle_config' must be an object, got {eagle!r}")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                                  for i in ids)):
        raise ReplayInputError(f"draft config {file}: eagle_config.eagle_aux_hidden_state_layer_ids must be a list "
                               f"of integers, got {ids!r}")
    num_aux = data.get("num_aux_hidden_states")
    if num_aux is None:
        num_aux = len(ids) if ids else 3
    elif isinstance(num_aux, bool) or not isinstance(num_aux, int) or num_aux < 1:
        raise ReplayInputError(f"draft config {file}: key 'num_aux_hidden_states' must be an integer >= 1, "
                               f"got {num_aux!r}")
    target_hidden = _get(data, "target_hidden_size", file, int, hidden)
    vocab = _get(data, "vocab_size", file, int, required=True)
    draft_vocab = _get(data, "draft_vocab_size", file, int, None)
    norm_before_fc = eagle.get("norm_before_fc", data.get("norm_before_fc", False))
    fc_norm = data.get("fc_norm") or data.get("use_aux_norm", False)
    layers = _get(data, "num_hidden_layers", file, int, 1)
    if layers != 1:
        notes.append(f"draft has {layers} decoder layers; the first takes the embedding and the projected state")
    spec = DraftSpec(
        file=file, hidden_size=hidden, target_hidden_size=target_hidden, num_aux=int(num_aux), num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=inter,
        rms_norm_eps=_get(data, "rms_norm_eps", file, float, 1e-6),
        vocab_size=vocab, draft_vocab_size=draft_vocab,
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        norm_before_fc=bool(norm_before_fc), fc_norm=bool(fc_norm), fc_bias=bool(data.get("bias", False)),
        o_bias=bool(data.get("attention_bias", False) or data.get("bias", False)),
        layer_ids=None if ids is None else tuple(ids), rope=_rope(data, file, head_dim), notes=tuple(notes))
    return spec
