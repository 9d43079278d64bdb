package RLRate;
# Rates measured from the clock, for the bandwidth tests (t/bandwidth.t,
# t/stream_bandwidth.t): a transfer is { samples => [[time, bytes so far],
# ...], done => time }, its samples taken as its reader got its bytes.
#
#   use RLRate qw(bytes_at rate_of within first_done);
#   bytes_at($c, $t);                       # bytes it had at time $t
#   rate_of($from, $to, @c);                # bytes a second together
#   within($got, $want, 0.10, 'what');      # a test: within 10%
#   first_done(@c);                         # until then, all were busy
use strict;
use warnings;
use Test::More;
use Exporter qw(import);

our @EXPORT_OK = qw(bytes_at rate_of within first_done);
our $MB = 1024 * 1024;

sub bytes_at {
    my ($c, $at) = @_;
    my $b = 0;
    for my $s (@{ $c->{samples} }) {
        last if $s->[0] > $at;
        $b = $s->[1];
    }
    return $b;
}

sub rate_of {
    my ($from, $to, @c) = @_;
    my $bytes = 0;
    $bytes += bytes_at($_, $to) - bytes_at($_, $from) for @c;
    return $bytes / ($to - $from);
}

sub within {
    my ($got, $want, $share, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    ok(abs($got - $want) <= $want * $share,
       sprintf('%s: %.3f MB/s, %.3f MB/s +-%d%%', $what, $got / $MB, $want / $MB, $share * 100));
}

sub first_done {
    my $d = $_[0]{done};
    $d = $_->{done} < $d ? $_->{done} : $d for @_;
    return $d;
}

1;
