//===- Conversions.cpp ----------------------------------------------------===//
#include "python/bindings/Conversions.h"

#include <cstring>

namespace py = pybind11;

namespace tilefuse::python {

py::dtype numpyDType(DType t) {
  switch (t) {
  case DType::F32: return py::dtype("float32");
  case DType::F64: return py::dtype("float64");
  case DType::F16: return py::dtype("float16");
  case DType::BF16: return py::dtype("float32");
  case DType::I32: return py::dtype("int32");
  case DType::I64: return py::dtype("int64");
  case DType::I1: return py::dtype("bool");
  }
  return py::dtype("float32");
}

DType dtypeOfArray(const py::array &a) {
  char kind = a.dtype().kind();
  auto size = a.itemsize();
  if (kind == 'f' && size == 4) return DType::F32;
  if (kind == 'f' && size == 8) return DType::F64;
  if (kind == 'f' && size == 2) return DType::F16;
  if (kind == 'i' && size == 4) return DType::I32;
  if (kind == 'i' && size == 8) return DType::I64;
  if (kind == 'b') return DType::I1;
  throw CompileError("unsupported numpy dtype " +
                     std::string(py::str(a.dtype())) +
                     "; tilefuse accepts float32, float64, float16, int32, "
                     "int64 and bool");
}

namespace {
HostTensor copyAs(const py::array &a, DType from, DType to) {
  Shape shape(a.shape(), a.shape() + a.ndim());
  // A native-endian, C-contiguous copy in the array's own dtype, then element
  // conversion: the bytes are read as native values.
  py::array native = a;
  if (a.dtype().byteorder() == '>' || a.dtype().byteorder() == '<') {
    py::dtype nativeType = a.dtype().attr("newbyteorder")("=");
    if (!nativeType.is(a.dtype()) && !nativeType.equal(a.dtype()))
      native = a.attr("astype")(nativeType);
  }
  py::array contiguous = py::array::ensure(native, py::array::c_style);
  HostTensor src(from, shape);
  copyBytes(src.bytes.data(), contiguous.data(), src.bytes.size());
  if (from == to)
    return src;
  HostTensor dst(to, shape);
  for (int64_t i = 0, n = src.size(); i < n; ++i)
    dst.setDouble(i, src.getDouble(i));
  return dst;
}
} // namespace

HostTensor toHostTensor(const py::array &a) {
  DType t = dtypeOfArray(a);
  return copyAs(a, t, t);
}

HostTensor toHostTensor(const py::array &a, const TensorSignature &want,
                        const std::string &what) {
  DType have = dtypeOfArray(a);
  Shape shape(a.shape(), a.shape() + a.ndim());
  bool dtypeOk = have == want.dtype ||
                 (want.dtype == DType::BF16 && have == DType::F32);
  if (!dtypeOk || shape != want.shape)
    throw CompileError(what + " must be " + want.str() + ", got " +
                       std::string(py::str(a.dtype())) + shapeToString(shape) +
                       "; pass an array of that dtype and shape");
  return copyAs(a, have, want.dtype);
}

py::array toNumpy(const HostTensor &t) {
  py::array out(numpyDType(t.dtype), std::vector<py::ssize_t>(t.shape.begin(),
                                                              t.shape.end()));
  if (t.dtype == DType::BF16) {
    auto *dst = static_cast<float *>(out.mutable_data());
    for (int64_t i = 0, n = t.size(); i < n; ++i)
      dst[i] = static_cast<float>(t.getDouble(i));
  } else {
    copyBytes(out.mutable_data(), t.bytes.data(), t.bytes.size());
  }
  return out;
}

} // namespace tilefuse::python
