"""Image classification with a small ResNet on scikit-learn digits or a folder of images.

The search covers width, blocks per stage, augmentation strength, learning rate, weight decay and
batch size. Augmentation (random shifts and input noise) is a module inside the model, active
only in training mode, so the trainer needs to know nothing about it.

    study = make_study()                              # scikit-learn digits, 1x8x8
    study = make_study(folder="photos/", image_size=32)
"""

from __future__ import annotations

from pathlib import Path

from studies._base import fidelities
from studies.resnet._data import ImagePreprocess, Images, digits_images, folder_images
from studies.resnet._model import Augment, BasicBlock, ResNet, build_resnet
from studies.resnet._params import ResNetParams, suggest_params
from studies.resnet._study import DEFAULT_FOLDER_SIZE, DIGITS_SIZE, ResNetStudy

__all__ = [
    "Augment",
    "BasicBlock",
    "ImagePreprocess",
    "Images",
    "ResNet",
    "ResNetParams",
    "ResNetStudy",
    "build_resnet",
    "digits_images",
    "folder_images",
    "make_study",
    "suggest_params",
]


def make_study(
    data: str | None = None,
    folder: str | Path | None = None,
    image_size: int | None = None,
    seed: int = 0,
    stages: int = 3,
    search_epochs: int = 6,
    full_epochs: int = 20,
    data_fraction: float = 1.0,
    precision: str = "auto",
) -> ResNetStudy:
    """The ResNet image-classification study. Options may arrive as strings (from the command line).

    Args:
        data: ``digits`` (scikit-learn's 8x8 digits) or ``folder``; defaults to ``folder`` when
            ``folder`` is given, else ``digits``.
        folder: A folder with one subfolder of images per class.
        image_size: Side of the square images the model sees; default 8 for digits (their native
            size), 32 for a folder.
        seed: Seeds the stratified split, the initial weights and training randomness.
        stages: ResNet stages; each after the first halves the resolution.
        search_epochs: Epochs per search trial.
        full_epochs: Epochs of the final (retrained) model.
        data_fraction: Fraction of the training split each search trial uses.
        precision: Autocast: ``auto`` (bf16 on a GPU that has it, else none), ``no``, ``bf16``, ``fp16``.

    Raises:
        ValueError: Unknown ``data``, a missing ``folder``, or an image size too small for ``stages``.
    """
    if data is None:
        data = "digits" if folder is None else "folder"
    default_size = DIGITS_SIZE if data == "digits" else DEFAULT_FOLDER_SIZE
    return ResNetStudy(
        data=data,
        folder=None if folder is None else Path(folder),
        image_size=default_size if image_size is None else int(image_size),
        stages=int(stages),
        seed=int(seed),
        precision=str(precision),
        **fidelities(search_epochs, full_epochs, data_fraction),
    )
