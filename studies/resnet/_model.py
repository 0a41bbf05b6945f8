"""A small ResNet for low-resolution images, with its augmentation inside the model."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from studies.resnet._params import ResNetParams

_MAX_SHIFT_FRACTION = 0.125
"""At augmentation strength 1 an image moves by up to 1/8 of its side (1 pixel on 8x8 digits)."""
_MAX_NOISE_STD = 0.3
"""At augmentation strength 1 Gaussian noise of this std is added (inputs are standardised)."""


class Augment(nn.Module):
    """Random integer shifts and Gaussian noise in training mode; the identity in eval mode.

    Augmentation is part of the model because the trainer only ever calls ``model(x)``;
    ``model.eval()`` (validation, export) switches it off.
    """

    def __init__(self, max_shift: int, noise_std: float) -> None:
        super().__init__()
        if max_shift < 0 or noise_std < 0:
            raise ValueError(f"max_shift and noise_std must be >= 0, got {max_shift}, {noise_std}")
        self.max_shift = max_shift
        self.noise_std = noise_std

    @classmethod
    def from_strength(cls, strength: float, image_size: int) -> Augment:
        """Shift and noise that grow linearly with ``strength`` in [0, 1]."""
        return cls(round(strength * _MAX_SHIFT_FRACTION * image_size), strength * _MAX_NOISE_STD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        if self.max_shift > 0:
            x = random_shift(x, self.max_shift)
        if self.noise_std > 0:
            x = x + self.noise_std * torch.randn_like(x)
        return x

    def extra_repr(self) -> str:
        return f"max_shift={self.max_shift}, noise_std={self.noise_std:.3g}"


def random_shift(x: torch.Tensor, max_shift: int) -> torch.Tensor:
    """Move each image of a ``(B, C, H, W)`` batch by its own offset in ``[-max_shift, max_shift]``."""
    b, _, h, w = x.shape
    # Replicate padding: the border of an image is background, so shifted-in pixels look like it.
    padded = F.pad(x, (max_shift,) * 4, mode="replicate")
    dy = torch.randint(0, 2 * max_shift + 1, (b, 1), device=x.device)
    dx = torch.randint(0, 2 * max_shift + 1, (b, 1), device=x.device)
    rows = dy + torch.arange(h, device=x.device)
    cols = dx + torch.arange(w, device=x.device)
    batch = torch.arange(b, device=x.device)[:, None, None]
    # One gather for the whole batch; advanced indices around a slice put (B, H, W) first.
    shifted = padded[batch, :, rows[:, :, None], cols[:, None, :]]
    return shifted.permute(0, 3, 1, 2).contiguous()


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn plus a shortcut (identity, or a strided 1x1 projection)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        last_norm = nn.BatchNorm2d(out_channels)
        # Each block starts as the identity, so a deep stack trains like a shallow one at first.
        nn.init.zeros_(last_norm.weight)
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            last_norm,
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """Augment -> stem -> stages of :class:`BasicBlock` -> global average pool -> linear head.

    Stage ``i`` has ``width * 2**i`` channels; every stage after the first halves the resolution.
    """

    def __init__(
        self,
        in_channels: int,
        n_classes: int,
        width: int,
        blocks: int,
        stages: int = 3,
        augment: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if min(in_channels, n_classes, width, blocks, stages) < 1:
            raise ValueError("in_channels, n_classes, width, blocks and stages must all be >= 1")
        self.augment = augment if augment is not None else nn.Identity()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        channels = width
        for stage in range(stages):
            out_channels = width * 2**stage
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, out_channels, stride))
                channels = out_channels
        self.stages = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(self.augment(x)))
        return self.head(torch.flatten(self.pool(x), 1))


def build_resnet(params: ResNetParams, in_channels: int, n_classes: int, image_size: int, stages: int = 3) -> ResNet:
    """The ResNet that ``params`` describe, for images of ``in_channels x image_size x image_size``."""
    augment = Augment.from_strength(params.augment, image_size)
    return ResNet(in_channels, n_classes, params.width, params.blocks, stages, augment)
