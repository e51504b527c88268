package bench

import "testing"

func TestMedianOf(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"none is 0, not NaN", nil, 0},
		{"one", []float64{7}, 7},
		{"odd count, unsorted", []float64{3, 1, 2}, 2},
		{"even count: mean of the middle two", []float64{5, 1, 4, 2, 3, 100, 3, 2, 4, 1}, 3},
		{"even count, middle two differ", []float64{4, 1, 2, 3}, 2.5},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := MedianOf(tt.in); got != tt.want {
			t.Errorf("%s: MedianOf(%v) = %v, want %v", tt.name, tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] {
				t.Errorf("%s: MedianOf reordered its input", tt.name)
				break
			}
		}
	}
}
