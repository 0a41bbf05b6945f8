"""Image classification data: digits or a folder of images, a fixed split and standardisation.

Every source yields :class:`Images` of raw pixels. :func:`image_study_data` splits them once
(stratified, from a seed, the same split helper as the tabular studies), fits
:class:`ImagePreprocess` on the training split only and wraps the splits for the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from studies._base import StudyData
from studies._errors import DataError
from studies._tabular import classification_study_data, digits_table

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
_GRAY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "F"})


@dataclass(frozen=True)
class Images:
    """Raw images of a classification problem."""

    pixels: np.ndarray
    """Raw pixel values, shape ``(n, channels, height, width)`` (0-16 for digits, 0-255 for files)."""
    labels: np.ndarray
    """Class indices, int64, shape ``(n,)``."""
    class_names: list[str]
    source: str
    """Where the images came from (``digits`` or a folder path)."""


class ImagePreprocess(nn.Module):
    """Raw ``(N, C, H, W)`` pixels of any numeric dtype -> standardised float images.

    Images whose side differs from ``image_size`` are resized first, so the exported model
    (``nn.Sequential(preprocess, model)``) accepts raw pixels of any size.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, image_size: int) -> None:
        super().__init__()
        self.image_size = image_size
        self.register_buffer("mean", mean.reshape(1, -1, 1, 1).float().clone())
        self.register_buffer("std", std.reshape(1, -1, 1, 1).float().clone())

    @classmethod
    def fit(cls, pixels: np.ndarray, image_size: int) -> ImagePreprocess:
        """Per-channel statistics of the (resized) training images; a constant channel keeps std 1."""
        channels = pixels.shape[1]
        identity = cls(torch.zeros(channels), torch.ones(channels), image_size)
        with torch.no_grad():
            x = identity(torch.from_numpy(pixels)).double()
        mean = x.mean(dim=(0, 2, 3))
        std = x.std(dim=(0, 2, 3))
        return cls(mean, torch.where(std > 1e-8, std, torch.ones_like(std)), image_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        if tuple(x.shape[-2:]) != (self.image_size, self.image_size):
            x = F.interpolate(x, size=(self.image_size,) * 2, mode="bilinear", antialias=True)
        return (x - self.mean) / self.std

    def extra_repr(self) -> str:
        return f"image_size={self.image_size}"


def digits_images() -> Images:
    """scikit-learn's handwritten digits as 1797 single-channel 8x8 images (pixels 0-16)."""
    table = digits_table()
    pixels = table.x.reshape(-1, 1, 8, 8)
    return Images(pixels, table.y, table.class_names, source="digits")


def folder_images(folder: str | Path, image_size: int) -> Images:
    """One subfolder per class (sorted names are the classes), resized to ``image_size`` squares.

    The images are all grayscale (one channel) when every file is grayscale, else all RGB.

    Raises:
        DataError: The folder is missing, has fewer than two classes, a class has no images, or a
            file cannot be read as an image.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"image folder not found: {folder}")
    class_dirs = sorted(path for path in folder.iterdir() if path.is_dir())
    if len(class_dirs) < 2:
        raise DataError(f"{folder}: need one subfolder per class and at least two classes")
    files = [(path, label) for label, class_dir in enumerate(class_dirs) for path in _image_files(class_dir)]
    images = [_open_image(path) for path, _ in files]
    mode = "L" if all(image.mode in _GRAY_MODES for image in images) else "RGB"
    size = (image_size, image_size)
    arrays = [np.asarray(image.convert(mode).resize(size, Image.Resampling.BILINEAR)) for image in images]
    pixels = np.stack(arrays)
    pixels = pixels[:, None] if mode == "L" else pixels.transpose(0, 3, 1, 2)
    labels = np.array([label for _, label in files], dtype=np.int64)
    return Images(np.ascontiguousarray(pixels), labels, [path.name for path in class_dirs], str(folder))


def image_study_data(images: Images, image_size: int, seed: int = 0) -> StudyData:
    """Split ``images``, standardise with training statistics and wrap everything for the trainer."""
    info = {"in_channels": images.pixels.shape[1], "image_size": image_size, "source": images.source}
    return classification_study_data(
        images.pixels, images.labels, images.class_names, lambda train: ImagePreprocess.fit(train, image_size), seed,
        info,
    )  # fmt: skip


def _image_files(class_dir: Path) -> list[Path]:
    files = sorted(path for path in class_dir.iterdir() if path.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        suffixes = ", ".join(sorted(IMAGE_SUFFIXES))
        raise DataError(f"{class_dir}: class folder has no images ({suffixes})")
    return files


def _open_image(path: Path) -> Image.Image:
    try:
        with Image.open(path) as image:
            image.load()
            return image.copy()
    except OSError as error:  # PIL's UnidentifiedImageError is an OSError
        raise DataError(f"{path}: cannot read image: {error}") from error
