//===- Conv.h - the sizes and reference loops of a convolution ----*- C++ -*-===//
//
// graph.conv, graph.conv_grad_input and graph.conv_grad_weight as library
// steps: their sizes (ConvParams, serialised in a Program) and plain loops
// that define them, used by the reference interpreter (in double) and by
// the CPU executor where oneDNN is missing (runtime/CpuConv.h).
//
//===----------------------------------------------------------------------===//
#ifndef TILEFUSE_RUNTIME_CONV_H
#define TILEFUSE_RUNTIME_CONV_H

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tilefuse {

/// One convolution, row-major and contiguous:
///   input  [batch, channels,    input...]
///   weight [outChannels, channels / groups, kernel...]
///   output [batch, outChannels, output...]
/// with `spatial` (1 to 3) entries in each array, output[i] =
/// (input[i] + padLow[i] + padHigh[i] - dilation[i] (kernel[i] - 1) - 1) /
/// stride[i] + 1. Output channel o reads the input channels of its group
/// o / (outChannels / groups). With `channelsLast` the input and the
/// output (and their gradients) hold their channels innermost instead:
/// [batch, input..., channels] and [batch, output..., outChannels].
struct ConvParams {
  int32_t spatial = 2;
  int64_t batch = 1, channels = 1, outChannels = 1, groups = 1;
  bool channelsLast = false;
  std::array<int64_t, 3> input{}, kernel{}, output{}, stride{1, 1, 1}, padLow{}, padHigh{},
      dilation{1, 1, 1};

  int64_t inputElements() const { return batch * channels * volume(input); }
  int64_t weightElements() const { return outChannels * (channels / groups) * volume(kernel); }
  int64_t outputElements() const { return batch * outChannels * volume(output); }
  int64_t volume(const std::array<int64_t, 3> &a) const {
    int64_t v = 1;
    for (int i = 0; i < spatial; ++i)
      v *= a[size_t(i)];
    return v;
  }
};

/// Bytes of workspace the compiler plans for a library convolution of `p`
/// on elements of `elementBytes` (cuDNN's algorithms: the executor picks
/// the fastest deterministic one that fits): the largest operand's bytes,
/// at least 16 MiB and at most 256 MiB. Live only during its step, it
/// shares the arena with the buffers not live then.
inline int64_t convWorkspaceBudget(const ConvParams &p, int64_t elementBytes) {
  int64_t largest = std::max({p.inputElements(), p.weightElements(), p.outputElements()});
  return std::min<int64_t>(int64_t(256) << 20,
                           std::max<int64_t>(int64_t(16) << 20, largest * elementBytes));
}

/// What a convolution step computes from its two operands (a, b):
///   Forward:    (input, weight)  -> output
///   GradInput:  (dOutput, weight) -> dInput   (a transposed convolution)
///   GradWeight: (input, dOutput)  -> dWeight
enum class ConvDirection : int32_t { Forward, GradInput, GradWeight };

/// Calls tap(inputIndex, weightIndex, outputIndex) for every product of the
/// convolution whose input position lies inside the input (padding reads 0
/// and contributes nothing). Spatial dimensions are walked as three, the
/// missing leading ones of size 1.
template <typename Tap> void forEachConvTap(const ConvParams &p, Tap &&tap) {
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0},
      dil{1, 1, 1};
  for (int i = 0; i < p.spatial; ++i) {
    size_t d = size_t(3 - p.spatial + i), s = size_t(i);
    in[d] = p.input[s], k[d] = p.kernel[s], out[d] = p.output[s];
    stride[d] = p.stride[s], pad[d] = p.padLow[s], dil[d] = p.dilation[s];
  }
  const int64_t inVolume = in[0] * in[1] * in[2], kVolume = k[0] * k[1] * k[2];
  const int64_t outVolume = out[0] * out[1] * out[2];
  const int64_t perGroupIn = p.channels / p.groups, perGroupOut = p.outChannels / p.groups;
  // Where element (image n, channel c, spatial offset s) of an activation
  // with `channels` channels over `volume` positions lies.
  auto at = [&](int64_t n, int64_t c, int64_t s, int64_t channels, int64_t volume) {
    return p.channelsLast ? (n * volume + s) * channels + c : (n * channels + c) * volume + s;
  };
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t oc = 0; oc < p.outChannels; ++oc) {
      const int64_t group = oc / perGroupOut;
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            const int64_t outIndex =
                at(n, oc, (o0 * out[1] + o1) * out[2] + o2, p.outChannels, outVolume);
            for (int64_t ic = 0; ic < perGroupIn; ++ic) {
              const int64_t channel = group * perGroupIn + ic;
              for (int64_t k0 = 0; k0 < k[0]; ++k0) {
                int64_t i0 = o0 * stride[0] - pad[0] + k0 * dil[0];
                if (i0 < 0 || i0 >= in[0])
                  continue;
                for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                  int64_t i1 = o1 * stride[1] - pad[1] + k1 * dil[1];
                  if (i1 < 0 || i1 >= in[1])
                    continue;
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    int64_t i2 = o2 * stride[2] - pad[2] + k2 * dil[2];
                    if (i2 < 0 || i2 >= in[2])
                      continue;
                    tap(at(n, channel, (i0 * in[1] + i1) * in[2] + i2, p.channels, inVolume),
                        (oc * perGroupIn + ic) * kVolume + (k0 * k[1] + k1) * k[2] + k2,
                        outIndex);
                  }
                }
              }
            }
          }
    }
}

/// The convolution by its definition: `out` (the output, dInput or dWeight)
/// written whole from operands `a` and `b` (see ConvDirection).
template <typename T>
void convReference(ConvDirection direction, const ConvParams &p, const T *a, const T *b,
                   T *out) {
  switch (direction) {
  case ConvDirection::Forward:
    std::fill(out, out + p.outputElements(), T(0));
    forEachConvTap(p, [&](int64_t x, int64_t w, int64_t y) { out[y] += a[x] * b[w]; });
    break;
  case ConvDirection::GradInput:
    std::fill(out, out + p.inputElements(), T(0));
    forEachConvTap(p, [&](int64_t x, int64_t w, int64_t y) { out[x] += a[y] * b[w]; });
    break;
  case ConvDirection::GradWeight:
    std::fill(out, out + p.weightElements(), T(0));
    forEachConvTap(p, [&](int64_t x, int64_t w, int64_t y) { out[w] += a[x] * b[y]; });
    break;
  }
}

/// The activation a convolution library applies after the bias
/// (graph.conv_bias_act; a Conv step's epilogue names it).
enum class ConvActivation : int32_t { None, Relu, Silu };

/// The activation named `name` ("none", "relu", "silu"), or nullopt.
inline std::optional<ConvActivation> convActivationNamed(std::string_view name) {
  if (name == "none")
    return ConvActivation::None;
  if (name == "relu")
    return ConvActivation::Relu;
  if (name == "silu")
    return ConvActivation::Silu;
  return std::nullopt;
}

/// What a forward convolution applies while it writes its output (a Conv
/// step's epilogue): a per-output-channel bias (null: none), then the
/// activation.
struct ConvEpilogue {
  const float *bias = nullptr;
  ConvActivation activation = ConvActivation::None;
  bool empty() const { return !bias && activation == ConvActivation::None; }
};

/// The epilogue of one value: `bias` (when given) added, then the
/// activation, as the graph ops it replaces define them (relu keeps NaN;
/// silu is x * sigmoid(x)).
template <typename T> T convEpilogueOf(T v, const T *bias, ConvActivation activation) {
  if (bias)
    v += *bias;
  if (activation == ConvActivation::Relu)
    return v <= T(0) ? T(0) : v;
  if (activation == ConvActivation::Silu)
    return v * (T(1) / (T(1) + std::exp(-v)));
  return v;
}

/// graph.conv_bias_act's epilogue over `count` images of a forward
/// convolution's output from image `first` on (rows of `p.outChannels`
/// values when channels-last, planes of one channel otherwise): bias[o]
/// (when given) added to channel o, then the activation.
template <typename T>
void convEpilogue(const ConvParams &p, const T *bias, ConvActivation activation, T *out,
                  int64_t first = 0, int64_t count = -1) {
  const int64_t plane = p.volume(p.output), channels = p.outChannels;
  const int64_t end = count < 0 ? p.batch : first + count;
  for (int64_t n = first; n < end; ++n)
    for (int64_t i = 0; i < plane * channels; ++i) {
      int64_t o = p.channelsLast ? i % channels : i / plane;
      T &v = out[n * plane * channels + i];
      v = convEpilogueOf(v, bias ? bias + o : nullptr, activation);
    }
}

} // namespace tilefuse

#endif // TILEFUSE_RUNTIME_CONV_H
