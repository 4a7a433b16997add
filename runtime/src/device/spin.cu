// spin.cu: a kernel of planc's own CUDA (`device::cuda::SOURCE`) that calibration's product
// runner also compiles alone (`probe::gpu`, which loads none of the training kernels).

// Holds one SM for `cycles` clock cycles and does nothing else. Calibration queues it ahead
// of each launch it times alone (probe::timing, probe::gpu), so that launch is already
// waiting in the stream when its start event runs: on an idle stream the interval also held
// the host's time to issue the launch (5-20 µs), which priced the short kernels of small
// models 10-15 % slow. It moves no bytes, so it leaves the L2 as the previous launch left it.
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
