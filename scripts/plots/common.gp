# Shared settings for every qkv plot: PNG via cairo, a CJK font so the
# Chinese labels render, CSV input.
set terminal pngcairo size 1400,900 font "WenQuanYi Zen Hei,12" enhanced
set datafile separator ","
set encoding utf8
set grid lc rgb "#dddddd"
set key noautotitle
c_scaled = "#1f77b4"
c_unscaled = "#d62728"
