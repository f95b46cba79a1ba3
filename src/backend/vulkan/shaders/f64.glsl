// e^x and ln x in double, written out: GLSL has neither for doubles. A result may differ
// from the C library's in its last bit. The module that includes this needs shaderFloat64.
// (sample.comp: the sampler's exps and min-p's log; moe_gate_f64.comp: sigmoid scores.)

// e^x in double: x = k ln2 + r, |r| <= ln2 / 2, e^r by its Taylor series to r^13 (under
// 1e-17 relative), then scaled by 2^k in two steps (2^1024 itself is not a double, and
// e^709.7 is). Under -745.2: 0; over 709.79 (past the largest double): +inf.
double exp_d(double x) {
    if (x < -745.2lf) return 0.0lf;
    if (x > 709.79lf) return double(uintBitsToFloat(0x7f800000u));
    const double k = roundEven(x * 1.4426950408889634lf);
    double r = fma(-k, 6.93147180369123816490e-01lf, x);
    r = fma(-k, 1.90821492927058770002e-10lf, r);
    double p = 1.0lf / 6227020800.0lf; // 1 / 13!
    const double f[13] = {1.0lf / 479001600.0lf, 1.0lf / 39916800.0lf, 1.0lf / 3628800.0lf, 1.0lf / 362880.0lf,
                          1.0lf / 40320.0lf,     1.0lf / 5040.0lf,     1.0lf / 720.0lf,     1.0lf / 120.0lf,
                          1.0lf / 24.0lf,        1.0lf / 6.0lf,        0.5lf,               1.0lf,
                          1.0lf};
    for (int i = 0; i < 13; i++) p = fma(p, r, f[i]);
    const int h = int(k) / 2;
    return ldexp(ldexp(p, h), int(k) - h);
}
// ln x in double for x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s),
// s = (m - 1) / (m + 1), by its series to s^25.
double log_d(double x) {
    int e;
    double m = frexp(x, e);
    if (m < 0.70710678118654752lf) {
        m *= 2.0lf;
        e -= 1;
    }
    const double s = (m - 1.0lf) / (m + 1.0lf), z = s * s;
    double p = 1.0lf / 25.0lf;
    for (int i = 11; i >= 0; i--) p = fma(p, z, 1.0lf / double(2 * i + 1));
    const double de = double(e);
    return fma(de, 6.93147180369123816490e-01lf, fma(2.0lf * s, p, de * 1.90821492927058770002e-10lf));
}
