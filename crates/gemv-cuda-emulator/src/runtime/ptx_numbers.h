// Small floating-point formats as the PTX ISA defines them, from their parameters (exponent and
// mantissa widths, bias), independently of the bit tricks in cuda_emu.h that the executor is
// tested against: decoding to an exact double, and rounding an exact value (a double plus the
// sign of what it left out) to nearest even, subnormals kept, past the largest finite value to
// infinity. NaN results are the caller's (PTX gives canonical NaNs).
#pragma once

#include <cmath>
#include <cstring>

namespace emu {
namespace ptx {

struct MiniFormat {
    int exponent_bits;
    int mantissa_bits;
    int bias;
    bool has_infinity;  // IEEE-like: the top exponent is infinity and NaN (E4M3 "fn" has neither)
};

constexpr MiniFormat kHalf{5, 10, 15, true};
constexpr MiniFormat kBf16{8, 7, 127, true};
constexpr MiniFormat kE4m3{4, 3, 7, false};

inline bool mini_is_nan(unsigned bits, MiniFormat f) {
    const unsigned magnitude = bits & ((1u << (f.exponent_bits + f.mantissa_bits)) - 1u);
    const unsigned top = (1u << f.exponent_bits) - 1u;
    if (f.has_infinity) return (magnitude >> f.mantissa_bits) == top && (magnitude & ((1u << f.mantissa_bits) - 1u));
    return magnitude == (1u << (f.exponent_bits + f.mantissa_bits)) - 1u;  // E4M3: S.1111.111
}

// 2^e as a double, for e within the normal doubles (built from its bits: no library call).
inline double power_of_two(int e) {
    const unsigned long long bits = (unsigned long long)(e + 1023) << 52;
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
}

// The exact value of a non-NaN code.
inline double mini_decode(unsigned bits, MiniFormat f) {
    const int width = f.exponent_bits + f.mantissa_bits;
    const bool negative = (bits >> width) & 1u;
    const unsigned exponent = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1u);
    const unsigned mantissa = bits & ((1u << f.mantissa_bits) - 1u);
    double magnitude;
    if (f.has_infinity && exponent == (1u << f.exponent_bits) - 1u) {
        magnitude = INFINITY;
    } else if (exponent == 0) {
        magnitude = (double)mantissa * power_of_two(1 - f.bias - f.mantissa_bits);
    } else {
        const double significand = (double)(mantissa | (1u << f.mantissa_bits));
        magnitude = significand * power_of_two((int)exponent - f.bias - f.mantissa_bits);
    }
    return negative ? -magnitude : magnitude;
}

// `value + rest` rounded to nearest even, where `rest` is smaller than half an ulp of `value` in
// double and only its sign matters (it breaks a tie `value` alone would show). Not NaN; `value`
// is zero, infinite or a normal double.
inline unsigned mini_round(double value, double rest, MiniFormat f) {
    const int width = f.exponent_bits + f.mantissa_bits;
    unsigned long long value_bits;
    std::memcpy(&value_bits, &value, 8);
    const bool negative = value_bits >> 63;
    const unsigned sign = negative ? 1u << width : 0u;
    const unsigned infinity = sign | (((1u << f.exponent_bits) - 1u) << f.mantissa_bits);
    const int biased = (int)((value_bits >> 52) & 0x7FFu);
    if (biased == 0x7FF) return infinity;
    if (biased == 0) return sign;  // zero (the formats' values and products are normal doubles)
    const double magnitude = negative ? -value : value;
    int exponent = biased - 1023;  // magnitude in [2^exponent, 2^(exponent+1))
    if (exponent < 1 - f.bias) exponent = 1 - f.bias;
    const int quantum = exponent - f.mantissa_bits;
    if (quantum - 1 > 1023 - 60) return infinity;  // far past any format's largest finite value
    const double units = magnitude * power_of_two(-quantum);  // exact: a power of two
    if (units < 0.25) {
        // Under half the smallest subnormal: rounds to zero (ties at exactly one half below).
        return sign;
    }
    unsigned long long whole = (unsigned long long)units;  // units < 2^(mantissa_bits + 1)
    const double fraction = units - (double)whole;
    const double toward_larger = negative ? -rest : rest;
    if (fraction > 0.5 || (fraction == 0.5 && (toward_larger > 0 || (toward_larger == 0 && (whole & 1)))))
        whole += 1;
    int e = exponent;
    if (whole == (2ull << f.mantissa_bits)) {
        whole >>= 1;
        e += 1;
    }
    const int max_exponent = (1 << f.exponent_bits) - (f.has_infinity ? 2 : 1) - f.bias;
    if (e > max_exponent) return infinity;
    if (whole < (1ull << f.mantissa_bits)) return sign | (unsigned)whole;  // subnormal
    return sign | ((unsigned)(e + f.bias) << f.mantissa_bits) | (unsigned)(whole - (1ull << f.mantissa_bits));
}

}  // namespace ptx
}  // namespace emu
