/*
 * wino43_tf_tmpl.h — F(4x4, 3x3)'s 1-D transforms (wino43.c's bt6 and at6) on vectors,
 * and the weight transform's (g6, in double), included by wino43_avx512.c and
 * wino43_avx2.c with VT (the float vector type), ADD, SUB, MUL, SET1 and VD, ADDD, SUBD,
 * MULD, SET1D (its double vector) bound to that ISA's intrinsics (inside its target
 * pragma). One body keeps the two from drifting apart: both compute the scalar code's
 * operations in its order, so every path gives the same bits.
 */

/* wino43.c's bt6 on vectors */
static inline void bt6_v(const VT d[6], VT v[6])
{
    const VT h = SET1(0.5f), two = SET1(2.0f);
    VT e13 = SUB(d[3], d[1]), e42 = SUB(d[4], d[2]);
    v[0] = ADD(SUB(ADD(d[0], d[4]), MUL(two, d[2])), ADD(e13, MUL(h, e13)));
    v[1] = ADD(SUB(ADD(d[1], d[4]), MUL(two, d[2])), MUL(h, SUB(d[3], d[2])));
    v[2] = ADD(ADD(SUB(d[4], d[1]), MUL(two, d[3])), MUL(h, ADD(d[3], d[2])));
    v[3] = ADD(e42, MUL(two, e13));
    v[4] = SUB(e42, MUL(h, e13));
    v[5] = ADD(SUB(ADD(d[1], d[5]), MUL(two, d[3])), ADD(e42, MUL(h, e42)));
}

/* wino43.c's at6 on vectors */
static inline void at6_v(const VT m[6], VT y[4])
{
    VT a = ADD(m[1], m[2]), b = SUB(m[2], m[1]);
    y[0] = ADD(ADD(ADD(m[0], a), m[3]), m[4]);
    y[1] = SUB(ADD(b, MUL(SET1(0.5f), m[3])), MUL(SET1(2.0f), m[4]));
    y[2] = ADD(ADD(a, MUL(SET1(0.25f), m[3])), MUL(SET1(4.0f), m[4]));
    y[3] = ADD(SUB(ADD(b, MUL(SET1(0.125f), m[3])), MUL(SET1(8.0f), m[4])), m[5]);
}

/* wino43.c's g6 on double vectors */
static inline void g6_v(VD a, VD b, VD c, VD r[6])
{
    VD p = ADDD(a, c);
    r[0] = a;
    r[1] = MULD(SUBD(b, p), SET1D(1.0 / 3));
    r[2] = MULD(ADDD(p, b), SET1D(1.0 / 3));
    r[3] = MULD(ADDD(ADDD(MULD(SET1D(4), a), MULD(SET1D(2), b)), c), SET1D(-4.0 / 15));
    r[4] = MULD(SUBD(ADDD(a, MULD(SET1D(4), c)), MULD(SET1D(2), b)), SET1D(1.0 / 15));
    r[5] = c;
}
