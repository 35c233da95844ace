# Writes fp16_tables.inc: numpy/torch-derived expectations for core/fp16.h (run: /opt/refvenv/bin/python tests/quant/fp16_tables.py > tests/quant/fp16_tables.inc)
import numpy as np, torch
rng = np.random.default_rng(1234)
# fp16 -> f32
h = [0x0000,0x8000,0x0001,0x8001,0x03FF,0x83FF,0x0400,0x8400,0x3C00,0xBC00,0x7BFF,0xFBFF,0x7C00,0xFC00,0x7E00,0x7C01,0x3555,0x0200,0x0155]
h += list(rng.integers(0, 65536, 100))
h = [int(x) for x in h]
f = np.array(h, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
print("// fp16 bits -> f32 bits (numpy: np.uint16(h).view(np.float16).astype(np.float32))")
print("constexpr uint32_t kFp16ToF32[][2] = {")
for a,b in zip(h,f): print(f"    {{0x{a:04x}, 0x{int(b):08x}}},")
print("};")
# f32 -> fp16
vals = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e6, float('inf'), -float('inf'), float('nan'),
        2**-24, 2**-25, 3*2**-25, 2**-26, 5*2**-26, 2**-14, 2**-14 - 2**-25, 6e-8, 1e-10,
        1+2**-11, 1+3*2**-11, 1+2**-11+2**-20, 2049.0, 2051.0, 2050.0, 4097.0, 0.1, 0.2, 0.3, 1/3, -2.5e-5, 3.14159265]
mags = 10**rng.uniform(-9, 6, 120)
sgn = rng.choice([-1.0, 1.0], 120)
vals += list(mags*sgn)
# random halfway points between adjacent fp16 normals and subnormals
for _ in range(40):
    b = int(rng.integers(0x0000, 0x7BFF))
    lo = np.array([b], dtype=np.uint16).view(np.float16).astype(np.float64)[0]
    hi = np.array([b+1], dtype=np.uint16).view(np.float16).astype(np.float64)[0]
    vals.append(float(np.float32((lo+hi)/2)) * float(rng.choice([-1,1])))
x = np.array(vals, dtype=np.float32)
hb = x.astype(np.float16).view(np.uint16)
print("// f32 bits -> fp16 bits (numpy: np.float32(x).astype(np.float16), round to nearest even)")
print("constexpr uint32_t kF32ToFp16[][2] = {")
for a,b in zip(x.view(np.uint32), hb): print(f"    {{0x{int(a):08x}, 0x{int(b):04x}}},")
print("};")
# f32 -> bf16
bv = [0.0, -0.0, 1.0, 1+2**-8, 1+3*2**-8, 1+2**-8+2**-20, -(1+2**-8), 3.0e38, 3.4e38, float('inf'), -float('inf'),
      1e-39, 1e-45, -1e-40, 2**-126, 0.1, 1/3, 65504.0]
bv += list((10**rng.uniform(-30, 30, 80))*rng.choice([-1.0,1.0],80))
xb = np.array(bv, dtype=np.float32)
tb = torch.from_numpy(xb).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
print("// f32 bits -> bf16 bits (torch: torch.tensor(x).to(torch.bfloat16), round to nearest even)")
print("constexpr uint32_t kF32ToBf16[][2] = {")
for a,b in zip(xb.view(np.uint32), tb): print(f"    {{0x{int(a):08x}, 0x{int(b):04x}}},")
print("};")
