"""The generic target integration's own logic, without SGLang: a delegate's setter call reported once (by the
class it hands the ids to), and the TBO split by the family row of the inner model."""

import wrapt

from eagle_probe import families
from eagle_probe.runtime.integrations import target_forward, targets
from eagle_probe.runtime.state import STATE


class Language:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.ids = layer_ids


class Delegate:  # like KimiK25ForConditionalGeneration: hands the ids to its language model's setter
    def __init__(self):
        self.language_model = Language()

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


def test_a_delegates_call_is_reported_once_by_the_class_it_calls(monkeypatch):
    seen = []
    monkeypatch.setattr(targets, "_observe_capture_config", lambda inst, ids: seen.append((type(inst).__name__, ids)))
    monkeypatch.setattr(STATE, "active", True)
    for cls in (Language, Delegate):
        monkeypatch.setattr(cls, "set_eagle3_layers_to_capture", wrapt.FunctionWrapper(
            cls.__dict__["set_eagle3_layers_to_capture"], targets.set_eagle3_layers_to_capture_wrapper))
    Delegate().set_eagle3_layers_to_capture([1, 2])
    assert seen == [("Language", [1, 2])]
    Language().set_eagle3_layers_to_capture([3])
    Delegate().set_eagle3_layers_to_capture(None)
    assert seen == [("Language", [1, 2]), ("Language", [3]), ("Language", None)]


def test_the_tbo_split_follows_the_family_row():
    v = (0, 5, 23, 0)
    llama, qwen3_moe, deepseek = (families.family(n, v) for n in ("llama", "qwen3_moe", "deepseek_v2"))
    assert target_forward._split(llama, 0, 8, None, True).tbo is None  # no TBO path: every layer captures
    split = target_forward._split(qwen3_moe, 0, 8, None, True)  # a TBO batch runs every layer in TBO stages
    assert split.normal == (0, 0) and split.lost([1, 4, 6]) == (1, 4, 6)
    assert target_forward._split(qwen3_moe, 0, 8, None, False).lost([1, 4, 6]) == ()
    split = target_forward._split(deepseek, 0, 8, 3, True)  # from first_k_dense_replace on
    assert split.normal == (0, 3) and split.lost([1, 4, 6]) == (4, 6)
    assert target_forward._split(None, 0, 8, 3, True).lost([1, 4, 6]) == (4, 6)  # no row: DeepSeek's split


def _flag_module(name, source):
    import types
    module = types.ModuleType(name)
    exec(source, module.__dict__)
    return module


def test_capture_flags_are_read_where_the_getter_returns_them_and_called_otherwise(monkeypatch):
    import sys

    import torch

    from eagle_probe.runtime.context import graph_capture
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # with CUDA the wrapper always calls the readers
    breakable = _flag_module("bcg_context", "_in_breakable_cuda_graph = False\n"
                                            "def is_in_breakable_cuda_graph():\n    return _in_breakable_cuda_graph\n")
    forms = {  # the getter's two shapes in SGLang 0.5.8 to 0.5.23, and one it does not know
        "one": "is_capture_mode = False\ndef get_is_capture_mode():\n    return is_capture_mode\n",
        "two": "is_capture_mode = False\ndef get_is_capture_mode():\n    return is_capture_mode or "
               "is_in_breakable_cuda_graph()\n",
        "other": "is_capture_mode = False\nother = True\ndef get_is_capture_mode():\n"
                 "    return is_capture_mode or other\n"}
    for form, source in forms.items():
        home = _flag_module(f"flag_home_{form}", source)
        home.is_in_breakable_cuda_graph = breakable.is_in_breakable_cuda_graph
        monkeypatch.setitem(sys.modules, home.__name__, home)
        monkeypatch.setattr(graph_capture, "_FLAG_HOMES", (home.__name__,))
        graph_capture.reset()
        flags = graph_capture.flag_dicts()
        if form == "other":
            assert flags is None  # unknown: the wrapper calls the getter
            continue
        for capture, in_breakable in ((False, False), (True, False), (False, True), (True, True)):
            home.is_capture_mode, breakable._in_breakable_cuda_graph = capture, in_breakable
            direct = flags[0]["is_capture_mode"] or flags[1]["_in_breakable_cuda_graph"]
            assert direct == home.get_is_capture_mode() == graph_capture.is_capturing()
    graph_capture.reset()
