"""Rotary position embedding for the replayed draft: the cos/sin tables at the dumped positions for each rope kind
SGLang's get_rope builds (default, linear, llama3, yarn), computed as SGLang computes its cos/sin cache, and their
application to queries and keys (neox halves or interleaved pairs, partial rotary dims)."""

import math

import torch

from .spec import RopeSpec


def _inv_freq(rope: RopeSpec) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [rotary_dim / 2], magnitude scale) for the rope kinds SGLang's get_rope builds."""
    dim = rope.rotary_dim
    # float32 throughout, as SGLang computes its cos/sin cache (the angles of late positions are sensitive)
    powers = rope.theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    base_freq = 1.0 / powers
    if rope.kind == "default":
        return base_freq, 1.0
    factor = float(rope.param("factor", 1.0))
    if rope.kind == "linear":  # positions divided by the factor (rope_tables)
        return base_freq, 1.0
    if rope.kind == "llama3":
        low, high = float(rope.param("low_freq_factor", 1.0)), float(rope.param("high_freq_factor", 4.0))
        original = float(rope.param("original_max_position_embeddings", rope.max_position))
        wavelength = 2 * math.pi / base_freq
        smooth = (original / wavelength - low) / (high - low) if low != high else torch.zeros_like(base_freq)
        blended = (1 - smooth) * base_freq / factor + smooth * base_freq
        scaled = torch.where(wavelength > original / low, base_freq / factor, blended)
        return torch.where(wavelength < original / high, base_freq, scaled), 1.0
    # yarn: interpolate the low frequencies, keep the high ones, ramp in between; scale the magnitude
    original = float(rope.param("original_max_position_embeddings", rope.max_position))
    beta_fast, beta_slow = float(rope.param("beta_fast", 32)), float(rope.param("beta_slow", 1))
    extrapolation = float(rope.param("extrapolation_factor", 1.0))

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.param("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = (1 - ramp) * extrapolation
    inv = 1.0 / (factor * powers) * (1 - keep) + base_freq * keep

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    m, m_all = rope.param("mscale", None), rope.param("mscale_all_dim", None)
    magnitude = mscale(factor, float(m)) / mscale(factor, float(m_all)) if m is not None and m_all is not None \
        else mscale(factor)
    return inv, magnitude * float(rope.param("attn_factor", 1.0))


def rope_tables(rope: RopeSpec, positions: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    inv, magnitude = _inv_freq(rope)
    t = positions.to(torch.float32).cpu()
    if rope.kind == "linear":
        t = t / float(rope.param("factor", 1.0))
    angles = t[:, None] * inv[None, :]
    cos, sin = angles.cos() * magnitude, angles.sin() * magnitude
    return cos.to(device), sin.to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, neox: bool) -> torch.Tensor:
    """x [N, heads, head_dim]; cos, sin [N, rotary_dim / 2]; the first rotary_dim channels rotate."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    if neox:
        x1, x2 = rot.chunk(2, dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    rotated = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated
