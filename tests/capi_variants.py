#!/usr/bin/env python3
"""The C API's variant setters (app/capi.cpp, issue 21) through ctypes, as scripts/compare_torch.py calls
them: each bad value is refused by the next call with a message naming the field, a step without the
variant refuses it naming the steps that have it, and fl_reset_variants() gives the plain problem back.
No GPU is needed: every refusal comes before a launch (and before the GPU is asked anything).

    capi_variants.py PATH/libflashladder_capi.so
"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.fl_last_error.restype = ctypes.c_char_p
lib.fl_workspace_bytes.restype = ctypes.c_longlong
lib.fl_workspace_bytes.argtypes = [ctypes.c_char_p] + [ctypes.c_int64] * 6 + [ctypes.c_int, ctypes.c_double,
                                                                              ctypes.c_int, ctypes.c_int]
lib.fl_set_window.argtypes = [ctypes.c_int64, ctypes.c_int64]
lib.fl_set_softcap.argtypes = [ctypes.c_double]
lib.fl_set_alibi.argtypes = [ctypes.c_int, ctypes.c_void_p]
I32P = ctypes.POINTER(ctypes.c_int32)
lib.fl_set_varlen.argtypes = [ctypes.c_int, I32P, I32P, ctypes.c_void_p, ctypes.c_void_p]
lib.fl_set_seqused_k.argtypes = [ctypes.c_int, I32P, ctypes.c_void_p]
FAKE_DEVICE = ctypes.c_void_p(0x1000)  # never dereferenced: every call below is refused or sizes only


def ints(*xs):
    return (ctypes.c_int32 * len(xs))(*xs)


def workspace(step="05", B=2, Nq=64, Nk=64):
    return lib.fl_workspace_bytes(step.encode(), B, 4, 4, Nq, Nk, 64, 0, 0.0, 1, 0)


failures = []


def refused(what, words):
    n = workspace()
    err = lib.fl_last_error().decode()
    if n != -1 or words not in err:
        failures.append(f"{what}: returned {n}, error {err!r}; wanted {words!r}")
    lib.fl_reset_variants()


base = workspace()
if base < 0:
    sys.exit(f"the plain problem was refused: {lib.fl_last_error().decode()}")
lib.fl_set_window(4, 0)
refused("window on step 05", "step 05_fa2_lse: does not support sliding window (window_left=4, window_right=0); "
        "the steps that do: 01_cpu_standard, 02_cpu_online_softmax")
lib.fl_set_window(-3, 0)
refused("window_left -3", "invalid problem: window_left = -3 is not allowed")
lib.fl_set_softcap(-1.0)
refused("softcap -1", "softcap = -1 is not allowed: it must be finite and > 0")
lib.fl_set_softcap(float("nan"))
refused("softcap nan", "softcap = nan is not allowed")
lib.fl_set_softcap(30.0)
refused("softcap on step 05", "does not support softcap (softcap=30)")
lib.fl_set_alibi(3, FAKE_DEVICE)
refused("alibi mode 3", "fl_set_alibi: mode 3 is not 0 (none), 1 (heads: slopes [H]) or 2 (batch_heads: slopes [B][H])")
lib.fl_set_alibi(1, None)
refused("alibi without slopes", "fl_set_alibi: ALiBi is on but its slopes pointer is null")
lib.fl_set_varlen(3, ints(0, 40, 64), ints(0, 30, 64), None, None)
refused("varlen without device copies", "fl_set_varlen: the offsets' device copies (cu_q_dev, cu_k_dev) are null")
lib.fl_set_varlen(3, ints(0, 40, 30), ints(0, 30, 64), FAKE_DEVICE, FAKE_DEVICE)
refused("decreasing offsets", "cu_seqlens_q[2] = 30 is less than cu_seqlens_q[1] = 40: the offsets must not decrease")
lib.fl_set_varlen(4, ints(0, 40, 50, 64), ints(0, 30, 40, 64), FAKE_DEVICE, FAKE_DEVICE)
refused("offsets for 3 sequences, B = 2", "cu_seqlens_q has 4 entries; it must have B + 1 = 3")
lib.fl_set_varlen(3, ints(0, 40, 64), ints(0, 30, 64), FAKE_DEVICE, FAKE_DEVICE)
refused("varlen on step 05", "does not support variable length (cu_seqlens_q, cu_seqlens_k: 2 packed sequences)")
lib.fl_set_seqused_k(2, ints(64, 65), FAKE_DEVICE)
refused("seqused_k past the keys", "seqused_k[1] = 65 is more than the 64 keys sequence 1 holds (Nk)")
lib.fl_set_seqused_k(2, ints(64, 60), None)
refused("seqused_k without its device copy", "fl_set_seqused_k: its device copy (used_dev) is null")
# A setter's bad arguments read as "off" (the packed buffers then read as padded ones): the next call
# refuses them, and fl_reset_variants() clears the refusal.
lib.fl_set_varlen(3, None, None, FAKE_DEVICE, FAKE_DEVICE)
refused("varlen without host offsets", "fl_set_varlen: its host array cu_q is null with n = 3")
lib.fl_set_varlen(-3, ints(0, 40, 64), ints(0, 30, 64), FAKE_DEVICE, FAKE_DEVICE)
refused("varlen n = -3", "fl_set_varlen: n = -3 is not allowed: it must be 0 (off) or the number of values")
lib.fl_set_seqused_k(2, None, FAKE_DEVICE)
refused("seqused_k without its host values", "fl_set_seqused_k: its host array used is null with n = 2")
# Null tensors are named before any launch (a kernel's fault would end the process's CUDA context).
lib.fl_forward.argtypes = ([ctypes.c_char_p] + [ctypes.c_int64] * 6 + [ctypes.c_int, ctypes.c_double, ctypes.c_int]
                           + [ctypes.c_void_p] * 7)
lib.fl_backward.argtypes = ([ctypes.c_char_p] + [ctypes.c_int64] * 6 + [ctypes.c_int, ctypes.c_double, ctypes.c_int]
                            + [ctypes.c_void_p] * 11)
F = FAKE_DEVICE
for what, call, words in (
        ("forward, null o", lambda: lib.fl_forward(b"05", 2, 4, 4, 64, 64, 64, 0, 0.0, 1, F, F, F, None, F, F, None),
         "o is a null pointer: it must be device memory of the problem's size"),
        ("backward, null dk", lambda: lib.fl_backward(b"09", 2, 4, 4, 64, 64, 64, 0, 0.0, 1, F, F, F, F, F, F, F, None,
                                                      F, F, None), "dk is a null pointer")):
    rc = call()
    err = lib.fl_last_error().decode()
    if rc != 1 or words not in err:
        failures.append(f"{what}: returned {rc}, error {err!r}; wanted {words!r}")
# The problem's own arguments (the audit's): a dtype other than 0, 1, 2 was bf16, a NaN scale the default.
for what, args, words in (("dtype 7", (7, 0.0), "dtype 7 is not 0 (fp32), 1 (fp16) or 2 (bf16)"),
                          ("scale nan", (1, float("nan")), "softmax scale = nan is not allowed")):
    n = lib.fl_workspace_bytes(b"05", 2, 4, 4, 64, 64, 64, 0, args[1], args[0], 0)
    err = lib.fl_last_error().decode()
    if n != -1 or words not in err:
        failures.append(f"{what}: returned {n}, error {err!r}; wanted {words!r}")
if workspace() != base:
    failures.append(f"after fl_reset_variants the plain problem gives {workspace()} bytes, not {base}")
if failures:
    print("capi_variants: FAILED\n  " + "\n  ".join(failures))
    sys.exit(1)
print("capi_variants: ok (20 refusals, each naming its field)")
