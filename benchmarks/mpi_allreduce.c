/* The peer side of the comparison scripts: OpenMPI's MPI_Allreduce (f32 sum) or MPI_Allgather timed exactly
 * as tbcoll-perf times tbcoll (median over iterations of the slowest rank; nccl-tests busbw factors), with
 * every size checked. Prints "size time_us busbw wrong" per size. Usage: mpi_allreduce MIN MAX ITERS [gather]. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t min_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : (64u << 20);
  int iters = argc > 3 ? atoi(argv[3]) : 20;
  int gather = argc > 4 && strcmp(argv[4], "gather") == 0;
  double* times = malloc(sizeof(double) * iters);
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    size_t count = gather ? bytes / 4 / n : bytes / 4;
    if (count == 0) continue;
    float* send = malloc(count * 4);
    float* recv = malloc(gather ? count * 4 * n : count * 4);
    for (size_t i = 0; i < count; ++i) send[i] = (float)((rank + i) % 3 + 1);
    if (gather) MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
    else MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0, total_wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      if (gather) {
        for (int r = 0; r < n; ++r) wrong += recv[r * count + i] != (float)((r + i) % 3 + 1);
      } else {
        float want = 0;
        for (int r = 0; r < n; ++r) want += (float)((r + i) % 3 + 1);
        wrong += recv[i] != want;
      }
    }
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 5; ++i) {
      if (gather) MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) {
      double start = MPI_Wtime();
      if (gather) MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
      else MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[i] = (MPI_Wtime() - start) * 1e6;
    }
    MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(times, iters, sizeof(double), compare);
    double median = times[iters / 2];
    size_t size = gather ? count * 4 * n : count * 4;
    double factor = gather ? (double)(n - 1) / n : 2.0 * (n - 1) / n;
    if (rank == 0) printf("%zu %.3f %.4f %lld\n", size, median, size / median / 1e3 * factor, total_wrong);
    free(send);
    free(recv);
  }
  free(times);
  MPI_Finalize();
  return 0;
}
