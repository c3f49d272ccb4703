// The orthonormal Hadamard rotation of K/V rows (SPEC §17): per head, a row of `width` values
// is split into power-of-two blocks (the largest that fit, e.g. 96 = 64 + 32) and each block
// is multiplied by the normalized Sylvester-Hadamard matrix H_n / sqrt(n). The transform is
// its own inverse (H_n is symmetric and H_n H_n = n I), so rotating q and k alike leaves q . k
// unchanged, and rotating the output back undoes the rotation of v. Layer: cpu. Scalar: a
// row costs O(width log width), small next to the attention that reads it.
#pragma once

#include <cstdint>

namespace kvcache::cpu {

// Rotates `rows` consecutive rows of `width` floats in place (fast Walsh-Hadamard transform).
void hadamard_rows(float* x, int64_t rows, int32_t width);

// The same by explicit matrix products (entry (i, j) of H_n is (-1)^popcount(i & j)), for the
// tests: O(width^2) a row.
void hadamard_rows_reference(float* x, int64_t rows, int32_t width);

}  // namespace kvcache::cpu
