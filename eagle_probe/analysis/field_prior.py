"""Low acceptance with no promise given (acceptance_low): the served first-position acceptance against what
published EAGLE-3 drafts reach on chat traffic, for when the draft's own training accuracy is not known.

The prior. Published first-position ("acceptance at token 0", "0-alpha", training "position 0 accuracy") figures of
EAGLE-3 drafts on chat-style traffic, all greedy or near it:
- vLLM PR #24243 (MiniCPM3 + its EAGLE-3 draft, chat samples, 5 speculative tokens): acceptance rate at token 0
  0.57-0.58, mean acceptance length 2.44-2.47;
- lmsys/sglang-EAGLE3-Llama-4-Maverick-17B-128E-Instruct-v1 (SpecForge, UltraChat + ShareGPT; model card): mean
  acceptance length 2.45 with 3 steps, top-1, 4 draft tokens; a chain whose positions share one conditional rate a
  gives a + a^2 + a^3 = 1.45, a = 0.63;
- vLLM issue #26191 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, the EAGLE-3 authors' draft, MT-bench, 7 tokens, temperature
  0): 12208 accepted tokens over 4816 drafts, mean acceptance length 3.53; the same chain model gives a = 0.74;
- SafeAILab/EAGLE issue #191 (an EAGLE-3 draft trained with the authors' code): test position-0 accuracy 0.70;
  speculators model cards: BCCard/MoAI-gemma-4-12B-it-speculator.eagle3 0.665 and Ichigec/a1-agents-eagle3-speculator
  0.714 position-0 accuracy on their validation splits.
So a served first position of about 0.57 to 0.75 is what the field reports; PRIOR (0.6) is the low end. A draft under
FLOOR (0.4, two thirds of the prior) is far below everything published.

The rule: at least MIN_STEPS (100) request-steps (each verify step counts every request in it, so 100 verify steps
give at least 100) and a served first-position rate under FLOOR, Z (3) or more standard errors (binomial, at the
prior) short of the prior. At 100 request-steps and 0.4 the shortfall is 4.1 standard errors, so every first-position
rate under 0.4 over 100 or more request-steps is named; a draft at 0.6 or above never is.
"""

import math
from collections.abc import Sequence

from .findings import ACCEPTANCE_LOW, CODES, Finding

PRIOR = 0.6
FLOOR = 0.4
MIN_STEPS = 100
Z = 3.0
SOURCES = ("vLLM PR #24243 (MiniCPM3 EAGLE-3, token 0: 0.57-0.58)",
           "lmsys/sglang-EAGLE3-Llama-4-Maverick-17B-128E-Instruct-v1 (SpecForge; accept length 2.45 of 3 steps: "
           "about 0.63)",
           "vLLM issue #26191 (EAGLE3-LLaMA3.1-Instruct-8B on MT-bench; accept length 3.53 of 7: about 0.74)",
           "SafeAILab/EAGLE issue #191 (position-0 accuracy 0.70)")
PRIOR_TEXT = (f"published EAGLE-3 drafts reach about 0.57 to 0.75 at the first position on chat traffic; the low end "
              f"{PRIOR} is the prior ({'; '.join(SOURCES)})")

# The figures are EAGLE-3's; a block draft's first position (the token after the bonus) is predicted from the same
# target states, so the floor applies, but the sources are not about block drafts.
BLOCK_NOTE = (" This is a block-diffusion draft (DFlash/DSpark): the figures are EAGLE-3 drafts', none of block "
              "drafts; its first draft position is still predicted from the target's states, so a rate this low "
              "points at its wiring or training as well.")


def judge(rate: float | None, steps: int) -> dict | None:
    """The first-position rate against the prior; None without a rate or request-steps."""
    if rate is None or not steps or steps < 0 or not 0 <= rate <= 1:
        return None
    se = math.sqrt(PRIOR * (1 - PRIOR) / steps)
    z = (PRIOR - rate) / se
    low = steps >= MIN_STEPS and rate < FLOOR and z >= Z
    return {"rate": round(rate, 6), "request_steps": steps, "prior": PRIOR, "floor": FLOOR,
            "z": round(min(z, 999.0), 2), "min_steps": MIN_STEPS, "low": low}


def low_finding(verdict: dict, per_position: Sequence[float | None], checks: list[dict], next_steps: list[str],
                where: str, causes: Sequence[str], block_draft: bool = False) -> Finding:
    """acceptance_low: which checks came back clean, what was not checked, the findings that may explain it and the
    commands to run next (summarize.causes builds them)."""
    clean = "; ".join(f"{c['check']} ({c['detail']})" for c in checks if c["status"] == "clean") or "none"
    unchecked = "; ".join(f"{c['check']} ({c['detail']})" for c in checks if c["status"] == "not checked") or "none"
    explained = (f" Findings that may explain it: {', '.join(causes)}." if causes else
                 " No other finding explains it.")
    rates = ", ".join("n/a" if r is None else f"{r:.3f}" for r in per_position)
    traffic = verdict.get("traffic") or "unknown traffic"
    sampled_note = (" Only sampled traffic was seen: at temperature > 0 a draft token is accepted with the target's "
                    "probability of it, so it accepts less with any wiring; send some greedy requests (temperature 0) "
                    "to judge the layers." if traffic.startswith("sampled") else "")
    message = (f"{where}: first-position acceptance {verdict['rate']:.3f} over {verdict['request_steps']} "
               f"request-steps of {traffic} is far below what EAGLE-3 drafts reach on chat traffic ({PRIOR_TEXT}): "
               f"under {FLOOR}, "
               f"{verdict['z']} standard errors short of {PRIOR}.{BLOCK_NOTE if block_draft else ''} No training "
               f"accuracy was given, so this is judged "
               f"against the field, not the draft's own promise (give --draft-accuracy for that). Per position: "
               f"{rates}.{sampled_note}{explained} Checks clean: {clean}. Not checked: {unchecked}. Next: "
               + " Then: ".join(next_steps))
    evidence = dict(verdict, per_position_rate=[None if r is None else round(r, 4) for r in per_position],
                    sources=list(SOURCES), checks=checks, next_steps=list(next_steps), likely_causes=list(causes))
    return Finding(ACCEPTANCE_LOW, CODES[ACCEPTANCE_LOW][0], message, tuple(sorted(evidence.items())))
