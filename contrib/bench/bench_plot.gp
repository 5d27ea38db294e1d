# SPDX-License-Identifier: MIT
# Chart of contrib/bench/encryption.sh: IOPS per suite (bars, one per pass)
# and the ratio to clear (points, right axis).
#   gnuplot -e "datafile='plot.dat'; outfile='encryption.png'" bench_plot.gp
# plot.dat: suite iops_direct iops_shm ratio_direct ratio_shm ("-" = not run)
set terminal pngcairo size 1000,560 noenhanced font ",10"
set output outfile
set datafile missing "-"
set title "coffer: 8 KiB random reads, queue depth 2 per dataset, primarycache=metadata"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set boxwidth 0.9
set ylabel "IOPS"
set y2label "ratio to clear"
set yrange [0:*]
set y2range [0:*]
set ytics nomirror
set y2tics 0.1
set grid ytics
set key outside bottom center horizontal
plot datafile using 2:xtic(1) title "IOPS, O_DIRECT", \
     datafile using 3 title "IOPS, tmpfs", \
     datafile using ($0 - 0.2):4 axes x1y2 with linespoints lw 2 pt 7 title "ratio, O_DIRECT", \
     datafile using ($0 + 0.2):5 axes x1y2 with linespoints lw 2 pt 5 title "ratio, tmpfs"
