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
GGML_Q8_0 = 8
GGML_Q4_K = 12
GGML_MXFP4 = 39
_TENSOR_NP = {GGML_F32: np.dtype("<f4"), GGML_F16: np.dtype("<f2")}
# Block types: (values per block, bytes per block).
BLOCKS = {GGML_Q8_0: (32, 34), GGML_Q4_K: (256, 144), GGML_MXFP4: (32, 17),
          11: (256, 110)}  # 11 = Q3_K (raw only)
_NP_TENSOR = {np.dtype("float32"): GGML_F32, np.dtype("float16"): GGML_F16}


class GGUFError(ValueError):
    pass


def _align(n, a):
    return (n + a - 1) // a * a


class _Raw:
    """Encoded bytes of a block-type tensor with its numpy shape."""

    def __init__(self, shape, ttype, data):
        self.shape, self.ttype, self.data, self.nbytes = shape, ttype, data, len(data)


def _f16_bytes(v):
    return np.asarray(v, dtype="<f2").reshape(-1, 1).view(np.uint8)


def encode_q8_0(x):
    """Blocks of 32: f16 scale amax/127, then 32 int8 values round(x / scale)."""
    b = x.reshape(-1, 32).astype(np.float64)
    d = (np.abs(b).max(axis=1) / 127.0).astype(np.float16)
    inv = np.divide(1.0, d.astype(np.float64), out=np.zeros(len(d)), where=d != 0)
    q = np.clip(np.rint(b * inv[:, None]), -127, 127).astype(np.int8)
    return np.concatenate([_f16_bytes(d), q.view(np.uint8)], axis=1).tobytes()


def decode_q8_0(raw, n):
    b = np.frombuffer(raw, dtype=np.uint8).reshape(n // 32, 34)
    d = b[:, :2].copy().view("<f2").astype(np.float32)
    return (d * b[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)


def encode_q4_k(x):
    """Super-blocks of 256 = 8 sub-blocks of 32, value = d*sc[j]*q - dmin*m[j], q in 0..15.

    Per sub-block: lo = min(min(x), 0), step = (max(x) - lo) / 15; the 6-bit sc and m quantize
    step and -lo against the super-block's largest (d = max step / 63, dmin = max(-lo) / 63).
    """
    b = x.reshape(-1, 8, 32).astype(np.float64)
    lo = np.minimum(b.min(axis=2), 0.0)
    step = (b.max(axis=2) - lo) / 15.0
    d = (step.max(axis=1) / 63.0).astype(np.float16)
    dmin = ((-lo).max(axis=1) / 63.0).astype(np.float16)
    d64, dmin64 = d.astype(np.float64)[:, None], dmin.astype(np.float64)[:, None]
    sc = np.clip(np.rint(np.divide(step, d64, out=np.zeros_like(step), where=d64 != 0)), 0, 63)
    m = np.clip(np.rint(np.divide(-lo, dmin64, out=np.zeros_like(lo), where=dmin64 != 0)), 0, 63)
    scale, mins = (d64 * sc)[:, :, None], (dmin64 * m)[:, :, None]
    q = np.clip(np.rint(np.divide(b + mins, scale, out=np.zeros_like(b), where=scale != 0)), 0, 15)
    q = q.astype(np.uint8)
    sc, m = sc.astype(np.uint8), m.astype(np.uint8)
    # 12 scale bytes: j < 4 -> bytes j (sc) and j + 4 (m), low 6 bits; j >= 4 -> byte j + 4
    # holds sc low nibble | m low nibble << 4, their top 2 bits go to bits 6-7 of bytes j - 4
    # (sc) and j (m).
    packed = np.zeros((len(d), 12), dtype=np.uint8)
    packed[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    # 128 nibble bytes: chunk c (64 values = sub-blocks 2c, 2c+1) -> bytes 32c..32c+31,
    # sub-block 2c in the low nibbles, 2c+1 in the high ones.
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(len(d), 128)
    return np.concatenate([_f16_bytes(d), _f16_bytes(dmin), packed, qs], axis=1).tobytes()


def decode_q4_k(raw, n):
    b = np.frombuffer(raw, dtype=np.uint8).reshape(n // 256, 144)
    d = b[:, 0:2].copy().view("<f2").astype(np.float32)
    dmin = b[:, 2:4].copy().view("<f2").astype(np.float32)
    s = b[:, 4:16]
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    qs = b[:, 16:].reshape(-1, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)
    out = d[:, :, None] * sc.astype(np.float32)[:, :, None] * q - (dmin * m.astype(np.float32))[:, :, None]
    return out.reshape(-1)


# E2M1 (1 sign, 2 exponent, 1 mantissa bits): code c -> value; bit 3 is the sign.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0] * 2) * np.repeat([1.0, -1.0], 8)


def encode_mxfp4(x):
    """Blocks of 32: one E8M0 byte e (scale 2^(e - 127)), then 16 bytes of E2M1 codes, value j
    in the low nibble of byte j and value j + 16 in the high one.

    e is the smallest exponent whose largest value 6 * 2^(e - 127) covers the block's largest
    |x| (127 for an all-zero block); each value takes the nearest E2M1 value of x / scale.
    """
    blocks = x.reshape(-1, 32)
    out = []
    for i in range(0, len(blocks), 1 << 16):  # 2M values at a time: the code search is 16x that
        b = blocks[i:i + (1 << 16)].astype(np.float64)
        amax = np.abs(b).max(axis=1)
        safe = np.where(amax > 0, amax, 6.0)
        e = np.clip(np.ceil(np.log2(safe / 6.0)) + 127, 0, 254).astype(np.int64)
        scale = np.ldexp(1.0, e - 127)
        # the nearest of the 16 code values (argmin takes the first of a tie: the positive code)
        q = np.abs(b[:, :, None] / scale[:, None, None] - E2M1[None, None, :]).argmin(axis=2)
        q = q.astype(np.uint8)
        qs = q[:, :16] | (q[:, 16:] << 4)
        out.append(np.concatenate([e.astype(np.uint8)[:, None], qs], axis=1).tobytes())
    return b"".join(out)


def decode_mxfp4(raw, n):
    b = np.frombuffer(raw, dtype=np.uint8).reshape(n // 32, 17)
    scale = np.ldexp(1.0, b[:, 0].astype(np.int64) - 127)
    codes = np.concatenate([b[:, 1:] & 0x0F, b[:, 1:] >> 4], axis=1)
    return (E2M1[codes] * scale[:, None]).astype(np.float32).reshape(-1)


_DECODERS = {GGML_Q8_0: decode_q8_0, GGML_Q4_K: decode_q4_k, GGML_MXFP4: decode_mxfp4}
_ENCODERS = {GGML_Q8_0: encode_q8_0, GGML_Q4_K: encode_q4_k, GGML_MXFP4: encode_mxfp4}


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

    def add_quantized_tensor(self, name, array, ttype):
        """Encode a float array [.., row] as Q8_0, Q4_K or MXFP4 (rows must be whole blocks)."""
        arr = np.ascontiguousarray(array, dtype=np.float32)
        enc = _ENCODERS[ttype]
        self.add_raw_tensor(name, arr.shape, ttype, enc(arr))

    def add_raw_tensor(self, name, shape, ttype, data):
        """A tensor of block type `ttype` given as its encoded bytes."""
        per, nbytes = BLOCKS[ttype]
        n = int(np.prod(shape, dtype=np.int64))
        if shape[-1] % per or len(data) != n // per * nbytes:
            raise GGUFError(f"tensor {name!r}: {len(data)} bytes do not encode shape {shape}")
        if any(n_ == name for n_, _ in self.tensors):
            raise GGUFError(f"duplicate tensor name {name!r}")
        self.tensors.append((name, _Raw(tuple(shape), ttype, bytes(data))))

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
            ttype = arr.ttype if isinstance(arr, _Raw) else _NP_TENSOR[arr.dtype]
            head += struct.pack("<IQ", ttype, offset)
            offsets.append(offset)
            offset = _align(offset + arr.nbytes, self.alignment)
        head += b"\0" * (_align(len(head), self.alignment) - len(head))
        data = bytearray(offset)
        for (name, arr), off in zip(self.tensors, offsets):
            if isinstance(arr, _Raw):
                data[off:off + arr.nbytes] = arr.data
            else:
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
            if ttype not in _TENSOR_NP and ttype not in _DECODERS:
                raise GGUFError(f"tensor {name}: type {ttype} unsupported (F32/F16/Q8_0/Q4_K/MXFP4)")
            if off % self.alignment:
                raise GGUFError(f"tensor {name}: offset {off} not aligned to {self.alignment}")
            shape = tuple(reversed(dims))
            if ttype in _DECODERS:
                n = int(np.prod(shape, dtype=np.int64))
                per, size = BLOCKS[ttype]
                start, nbytes = data_start + off, n // per * size
                if dims[0] % per or start + nbytes > len(buf):
                    raise GGUFError(f"tensor {name}: bad block data for shape {shape}")
                self.tensors[name] = _DECODERS[ttype](buf[start:start + nbytes], n).reshape(shape)
                self.tensor_types[name] = ttype
                continue
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
    # Block types: hand-checked values, then encode -> decode within the formats' error.
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)
    w = GGUFWriter()
    w.add_quantized_tensor("q8", x, GGML_Q8_0)
    w.add_quantized_tensor("q4k", x, GGML_Q4_K)
    g = GGUFFile(w.to_bytes())
    amax = np.abs(x).max()
    assert np.abs(g.tensors["q8"] - x).max() <= amax * (0.5 / 127 + 1e-3)
    err = np.abs(g.tensors["q4k"] - x).max()
    assert 0 < err <= amax * 0.12, err
    one = np.zeros(144, dtype=np.uint8)
    one[0:2] = _f16_bytes(1.0)[0]; one[2:4] = _f16_bytes(0.5)[0]
    one[4 + 2] = 3; one[4 + 6] = 2; one[16 + 32] = 0x75  # sub-block 2: sc 3, m 2
    v = decode_q4_k(one.tobytes(), 256)
    assert v[64] == 3 * 5 - 1.0 and v[65] == -1.0, (v[64], v[65])
    # MXFP4 by hand: e = 130 (scale 8); byte 1 + j = code j | code 15 - j << 4.
    blk = bytes([130] + [j | (15 - j) << 4 for j in range(16)])
    v = decode_mxfp4(blk, 32)
    assert v[7] == 48.0 and v[16] == -48.0 and v[3] == 12.0 and v[20] == -12.0, v  # v[20]: code 11
    w = GGUFWriter()
    w.add_quantized_tensor("mx", x, GGML_MXFP4)
    g = GGUFFile(w.to_bytes())
    blocks = x.reshape(-1, 32)
    err = np.abs(g.tensors["mx"].reshape(-1, 32) - blocks).max(axis=1)
    assert (err <= np.abs(blocks).max(axis=1) / 3).all() and err.max() > 0  # gap 4..6 steps
    print("gguf_py selftest ok")


if __name__ == "__main__":
    _selftest()
