#!/usr/bin/perl
# unzip-h1.pl ZIP DEST PREFIX: extracts the module zip ZIP into DEST, dropping PREFIX (the
# module@version/ every name starts with), and prints the zip's go.sum hash ("h1:...", the
# dirhash Hash1 of golang.org/x/mod: SHA-256 over "sha256-hex  name\n" of every file in name
# order). tools/go.sh compares it with the pinned sum before it uses anything it extracted.
# Perl and its core modules come with git, so a fresh machine needs no unzip.
use strict;
use warnings;
use Compress::Raw::Zlib;
use Digest::SHA qw(sha256 sha256_hex);
use MIME::Base64 qw(encode_base64);
use File::Path qw(make_path);
use File::Basename qw(dirname);

my ($zip, $dest, $prefix) = @ARGV;
die "usage: unzip-h1.pl ZIP DEST PREFIX\n" unless defined $prefix;
open(my $fh, '<:raw', $zip) or die "open $zip: $!\n";
my $data = do { local $/; <$fh> };
close $fh;

# The end of central directory record: the last "PK\5\6".
my $eocd = rindex($data, "PK\x05\x06");
die "$zip: not a zip file (no end of central directory)\n" if $eocd < 0;
my ($entries, $cdsize, $cdoff) = unpack('x10 v V V', substr($data, $eocd, 22));
die "$zip: zip64 archives are not supported\n" if $entries == 0xffff || $cdoff == 0xffffffff;

my (%sum, $pos);
$pos = $cdoff;
for (1 .. $entries) {
	my ($sig, $flags, $method, $csize, $usize, $nlen, $elen, $clen, $ext, $loff) =
		unpack('V x4 v v x8 V V v v v x4 V V', substr($data, $pos, 46));
	die "$zip: bad central directory entry\n" unless $sig == 0x02014b50;
	my $name = substr($data, $pos + 46, $nlen);
	$pos += 46 + $nlen + $elen + $clen;
	die "$zip: entry $name is outside $prefix\n" unless index($name, $prefix) == 0;
	die "$zip: unsafe name $name\n" if $name =~ m{(^|/)\.\.(/|$)} || $name =~ /\n/;
	next if $name =~ m{/$};
	my ($lsig, $lnlen, $lelen) = unpack('V x22 v v', substr($data, $loff, 30));
	die "$zip: bad local header of $name\n" unless $lsig == 0x04034b50;
	my $raw = substr($data, $loff + 30 + $lnlen + $lelen, $csize);
	my $out;
	if ($method == 0) {
		$out = $raw;
	} elsif ($method == 8) {
		my ($inf, $st) = Compress::Raw::Zlib::Inflate->new(-WindowBits => -MAX_WBITS(), -Bufsize => 1 << 20);
		die "inflate: $st\n" unless $inf;
		$st = $inf->inflate($raw, $out);
		die "$zip: inflate $name: $st\n" unless $st == Z_STREAM_END || $st == Z_OK;
	} else {
		die "$zip: $name uses compression method $method\n";
	}
	die "$zip: $name has " . length($out) . " bytes, the directory says $usize\n" unless length($out) == $usize;
	$sum{$name} = sha256_hex($out);
	my $path = "$dest/" . substr($name, length($prefix));
	make_path(dirname($path));
	open(my $o, '>:raw', $path) or die "write $path: $!\n";
	print $o $out;
	close $o or die "write $path: $!\n";
	my $mode = ($ext >> 16) & 0777;
	chmod($mode || 0644, $path);
}
my $summary = join('', map { "$sum{$_}  $_\n" } sort keys %sum);
print 'h1:' . encode_base64(sha256($summary), '') . "\n";
