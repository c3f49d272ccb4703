"""Minimal pure-Python (+numpy) GGUF v3 writer and reader.

Used by the scripts that make and check test models (train_tiny_model.py,
reference_forward.py, make_tiny_hf.py). Supports metadata value types 0-12
(including arrays, also arrays of strings) and F32/F16 tensors.

Dims convention: GGUF lists dims fastest-first, i.e. the reversed numpy shape.
A torch/numpy [out, in] weight is stored with GGUF dims [in, out] and its data
row-major exactly as numpy holds it. The reader returns arrays in numpy shape.
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32

# Metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)

_SCALAR_FMT = {
    UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
    FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d",
}

# Tensor types (ggml_type ids).
GGML_F32 = 0
GGML_F16 = 1
_TENSOR_NP = {GGML_F32: np.dtype("<f4"), GGML_F16: np.dtype("<f2")}
_NP_TENSOR = {np.dtype("float32"): GGML_F32, np.dtype("float16"): GGML_F16}


class GGUFError(ValueError):
    pass


def _align(n, a):
    return (n + a - 1) // a * a


class GGUFWriter:
    """Collect metadata and tensors, then write() them to a file."""

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.kv = []          # (key, type, value, elem_type or None)
        self.tensors = []     # (name, array)
        self.alignment = alignment
        if alignment != DEFAULT_ALIGNMENT:
            self.add_uint32("general.alignment", alignment)

    def _add(self, key, vtype, value, elem=None):
        if any(k == key for k, _, _, _ in self.kv):
            raise GGUFError(f"duplicate metadata key {key!r}")
        self.kv.append((key, vtype, value, elem))

    def add_uint8(self, k, v): self._add(k, UINT8, int(v))
    def add_int8(self, k, v): self._add(k, INT8, int(v))
    def add_uint16(self, k, v): self._add(k, UINT16, int(v))
    def add_int16(self, k, v): self._add(k, INT16, int(v))
    def add_uint32(self, k, v): self._add(k, UINT32, int(v))
    def add_int32(self, k, v): self._add(k, INT32, int(v))
    def add_float32(self, k, v): self._add(k, FLOAT32, float(v))
    def add_bool(self, k, v): self._add(k, BOOL, bool(v))
    def add_string(self, k, v): self._add(k, STRING, str(v))
    def add_uint64(self, k, v): self._add(k, UINT64, int(v))
    def add_int64(self, k, v): self._add(k, INT64, int(v))
    def add_float64(self, k, v): self._add(k, FLOAT64, float(v))

    def add_array(self, k, elem_type, values):
        if elem_type == ARRAY:
            raise GGUFError("nested arrays are not supported by this writer")
        self._add(k, ARRAY, list(values), elem_type)

    def add_tensor(self, name, array):
        arr = np.ascontiguousarray(array)
        if arr.dtype not in _NP_TENSOR:
            raise GGUFError(f"tensor {name!r}: dtype {arr.dtype} unsupported (float32/float16 only)")
        if any(n == name for n, _ in self.tensors):
            raise GGUFError(f"duplicate tensor name {name!r}")
        self.tensors.append((name, arr))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value, elem):
        if vtype == STRING:
            return self._str(value)
        if vtype == ARRAY:
            out = struct.pack("<IQ", elem, len(value))
            return out + b"".join(self._value(elem, v, None) for v in value)
        return struct.pack(_SCALAR_FMT[vtype], value)

    def to_bytes(self):
        head = bytearray(GGUF_MAGIC)
        head += struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, vtype, value, elem in self.kv:
            head += self._str(key) + struct.pack("<I", vtype) + self._value(vtype, value, elem)
        offset = 0
        offsets = []
        for name, arr in self.tensors:
            dims = list(reversed(arr.shape)) or [1]
            head += self._str(name) + struct.pack("<I", len(dims))
            head += b"".join(struct.pack("<Q", d) for d in dims)
            head += struct.pack("<IQ", _NP_TENSOR[arr.dtype], offset)
            offsets.append(offset)
            offset = _align(offset + arr.nbytes, self.alignment)
        head += b"\0" * (_align(len(head), self.alignment) - len(head))
        data = bytearray(offset)
        for (name, arr), off in zip(self.tensors, offsets):
            data[off:off + arr.nbytes] = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        return bytes(head) + bytes(data)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"truncated file reading {what} at offset {self.pos} (need {n} bytes)")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.unpack("<Q", what + " length")
        return bytes(self.take(n, what)).decode("utf-8")


class GGUFFile:
    """A parsed GGUF file: .kv {key: value}, .kv_types {key: (type, elem)}, .tensors {name: ndarray}."""

    def __init__(self, path_or_bytes):
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            buf = bytes(path_or_bytes)
        else:
            with open(path_or_bytes, "rb") as f:
                buf = f.read()
        self._parse(buf)

    def _read_value(self, cur, vtype, key):
        if vtype == STRING:
            return cur.string(f"string value of {key}")
        if vtype == ARRAY:
            elem = cur.unpack("<I", f"array type of {key}")
            n = cur.unpack("<Q", f"array length of {key}")
            if elem == ARRAY:
                raise GGUFError(f"key {key}: nested arrays unsupported")
            if elem not in _SCALAR_FMT and elem != STRING:
                raise GGUFError(f"key {key}: unknown array element type {elem}")
            if elem != STRING and n * struct.calcsize(_SCALAR_FMT[elem]) > len(cur.buf):
                raise GGUFError(f"key {key}: array length {n} exceeds file size")
            return [self._read_value(cur, elem, key) for _ in range(n)]
        if vtype not in _SCALAR_FMT:
            raise GGUFError(f"key {key}: unknown value type {vtype}")
        return cur.unpack(_SCALAR_FMT[vtype], f"value of {key}")

    def _parse(self, buf):
        cur = _Cursor(buf)
        if cur.take(4, "magic") != GGUF_MAGIC:
            raise GGUFError("bad magic: not a GGUF file")
        self.version = cur.unpack("<I", "version")
        if self.version != 3:
            raise GGUFError(f"unsupported GGUF version {self.version} (expected 3)")
        n_tensors = cur.unpack("<Q", "tensor count")
        n_kv = cur.unpack("<Q", "kv count")
        self.kv, self.kv_types = {}, {}
        for _ in range(n_kv):
            key = cur.string("key")
            vtype = cur.unpack("<I", f"type of {key}")
            if key in self.kv:
                raise GGUFError(f"duplicate key {key}")
            elem = None
            if vtype == ARRAY:
                elem = struct.unpack_from("<I", buf, cur.pos)[0] if cur.pos + 4 <= len(buf) else None
            self.kv[key] = self._read_value(cur, vtype, key)
            self.kv_types[key] = (vtype, elem)
        self.alignment = int(self.kv.get("general.alignment", DEFAULT_ALIGNMENT))
        infos = []
        for _ in range(n_tensors):
            name = cur.string("tensor name")
            nd = cur.unpack("<I", f"n_dims of {name}")
            if nd > 4:
                raise GGUFError(f"tensor {name}: {nd} dims (max 4)")
            dims = [cur.unpack("<Q", f"dim of {name}") for _ in range(nd)]
            ttype = cur.unpack("<I", f"type of {name}")
            off = cur.unpack("<Q", f"offset of {name}")
            infos.append((name, dims, ttype, off))
        data_start = _align(cur.pos, self.alignment)
        self.tensors, self.tensor_types = {}, {}
        for name, dims, ttype, off in infos:
            if ttype not in _TENSOR_NP:
                raise GGUFError(f"tensor {name}: type {ttype} unsupported (F32/F16 only)")
            if off % self.alignment:
                raise GGUFError(f"tensor {name}: offset {off} not aligned to {self.alignment}")
            shape = tuple(reversed(dims))
            dt = _TENSOR_NP[ttype]
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            start = data_start + off
            if start + nbytes > len(buf):
                raise GGUFError(f"tensor {name}: data [{start}, {start + nbytes}) past end of file {len(buf)}")
            self.tensors[name] = np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize,
                                               offset=start).reshape(shape)
            self.tensor_types[name] = ttype

    def get(self, key, default=None):
        return self.kv.get(key, default)


def read(path):
    return GGUFFile(path)


# GPT-2 byte-to-unicode alphabet: printable bytes map to themselves, the rest to U+0100.. in order.
def gpt2_byte_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    mapping = {}
    extra = 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _selftest():
    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_uint8("a.u8", 7); w.add_int8("a.i8", -3); w.add_uint16("a.u16", 600)
    w.add_int16("a.i16", -600); w.add_uint32("a.u32", 1 << 31); w.add_int32("a.i32", -5)
    w.add_float32("a.f32", 0.5); w.add_bool("a.b", True); w.add_uint64("a.u64", 1 << 40)
    w.add_int64("a.i64", -(1 << 40)); w.add_float64("a.f64", 1e-300)
    w.add_array("a.arr", INT32, [1, -2, 3]); w.add_array("a.sarr", STRING, ["x", "", "\u0120y"])
    w.add_array("a.empty", STRING, [])
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(5, dtype=np.float16)
    w.add_tensor("t.a", a); w.add_tensor("t.b", b)
    g = GGUFFile(w.to_bytes())
    assert g.kv["a.u32"] == 1 << 31 and g.kv["a.i16"] == -600 and g.kv["a.f64"] == 1e-300
    assert g.kv["a.arr"] == [1, -2, 3] and g.kv["a.sarr"] == ["x", "", "\u0120y"] and g.kv["a.empty"] == []
    assert g.kv_types["a.arr"] == (ARRAY, INT32)
    assert np.array_equal(g.tensors["t.a"], a) and np.array_equal(g.tensors["t.b"], b)
    assert g.tensors["t.a"].shape == (3, 4)
    print("gguf_py selftest ok")


if __name__ == "__main__":
    _selftest()
