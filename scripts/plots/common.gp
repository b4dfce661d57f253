# Shared settings for every qkv plot: PNG via cairo, a CJK font so the
# Chinese labels render, CSV input.
set terminal pngcairo size 1400,900 font "WenQuanYi Zen Hei,12" enhanced
set datafile separator ","
set encoding utf8
set grid lc rgb "#dddddd"
set key noautotitle
c_scaled = "#1f77b4"
c_unscaled = "#d62728"

# The minor tics of a log y axis: gnuplot puts them at 2..9 times each
# major tic. That suits majors a decade apart; once the axis spans more
# than 9 decades the majors skip decades, and those minor tics clump just
# above each major. Such an axis gets none. lo and hi: the logs (base 10)
# of the smallest and the largest positive value on it.
# Use: eval log_minor_ytics(lo, hi)
log_minor_ytics(lo, hi) = (ceil(hi) - floor(lo) > 9) ? "set mytics 1" : "set mytics default"
# log10 of v where it has a place on a log axis, else the default d (so
# that stats over it never runs out of points)
log10_or(v, d) = (v > 0 && v < 1e300) ? log10(v) : d
# A vector as the CSV writes it, without commas (1;2;3), written as the
# tutorial writes one (1, 2, 3); and how many numbers it has.
commas(v) = strstrt(v, ";") ? v[1:strstrt(v, ";") - 1].", ".commas(v[strstrt(v, ";") + 1:]) : v
components(v) = strstrt(v, ";") ? 1 + components(v[strstrt(v, ";") + 1:]) : 1
